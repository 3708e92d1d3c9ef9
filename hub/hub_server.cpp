#include "hub/hub_server.hpp"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "common/durable_file.hpp"
#include "common/unix_time.hpp"
#include "hub/json_answer.hpp"
#include "hub/record_commands.hpp"
#include "net/pki.hpp"

namespace garm_edge::hub {
namespace {

using net::HttpRequest;
using net::HttpResponse;
using nlohmann::json;

UniqueFd hold_state_directory(const std::filesystem::path& state_dir) {
  auto held = lock_exclusively(state_dir / "serve.lock");
  if (!held) {
    throw std::runtime_error("state directory " + state_dir.string() +
                             " is served by another garm-edge-hub process (it holds " +
                             (state_dir / "serve.lock").string() +
                             "): give each hub a state directory of its own");
  }
  return std::move(*held);
}

}  // namespace

HubServer::HubServer(asio::io_context& io, HubConfig config, Logger& log,
                     StateWatcher::Timing watch_timing)
    : io_(io),
      config_(std::move(config)),
      log_(log),
      store_(open_hub_store(config_)),
      serve_lock_(hold_state_directory(config_.state_dir)),
      watcher_(store_, log_, watch_timing, config_.url,
               [this] { asio::post(io_, [this] { on_state_read(); }); }),
      // Three heartbeats: a view missed once or twice is still used.
      views_(3 * config_.tunnels.heartbeat_interval),
      tunnels_(io, config_.tunnels),
      limiter_(config_.enrolment_failures_per_minute),
      ca_pem_(store_.ca_pem()) {
  // Before the certificate is loaded: one made before roles existed gets the hub's role now.
  store_.prepare_to_serve(unix_now());
  crl_written_ = crl_write_time();
  const auto files = tls_files();
  net::TlsServerOptions agents;
  agents.address = config_.agents.address;
  agents.port = config_.agents.port;
  agents.allow = config_.agents.allow;
  agents.max_connections = config_.agents.max_connections;
  agents.limits.max_body_bytes = 64 * 1024;
  agent_server_ = std::make_unique<net::TlsServer>(
      io, agents, load_agent_tls(files),
      [this](HttpRequest request, net::PeerIdentity peer, net::TlsServer::Respond respond) {
        answer_safely(respond, [&] { on_agent_request(std::move(request), peer, respond); });
      });
  net::TlsServerOptions providers;
  providers.address = config_.providers.address;
  providers.port = config_.providers.port;
  providers.allow = config_.providers.allow;
  providers.max_connections = config_.providers.max_connections;
  providers.request_timeout = std::chrono::seconds(60);
  provider_server_ = std::make_unique<net::TlsServer>(
      io, providers, net::TlsConfig::load(net::TlsConfig::Role::server, files),
      [this](HttpRequest request, net::PeerIdentity peer, net::TlsServer::Respond respond) {
        answer_safely(respond, [&] { on_provider_request(std::move(request), peer, respond); });
      });
}

net::TlsFiles HubServer::tls_files() const {
  return {.ca = store_.pki() / "ca.crt",
          .crl = store_.crl_path(),
          .certificate = store_.pki() / "hub.crt",
          .key = store_.pki() / "hub.key"};
}

std::shared_ptr<const net::TlsConfig> HubServer::load_agent_tls(const net::TlsFiles& files) {
  // A host has no certificate yet when it enrols.
  return net::TlsConfig::load(net::TlsConfig::Role::server, files,
                              net::TlsConfig::ClientCertificates::optional);
}

std::filesystem::file_time_type HubServer::crl_write_time() const {
  std::error_code error;
  return std::filesystem::last_write_time(store_.crl_path(), error);
}

void HubServer::reload_if_crl_changed() {
  const auto written = crl_write_time();
  if (written == crl_written_) {
    return;
  }
  try {
    const auto files = tls_files();
    agent_server_->reload(load_agent_tls(files));
    provider_server_->reload(net::TlsConfig::load(net::TlsConfig::Role::server, files));
    crl_written_ = written;
    log_.info("the CRL changed: new connections are checked against it");
  } catch (const std::exception& e) {
    log_.warning(std::string("the CRL changed but cannot be loaded, keeping the last: ") +
                 e.what());
  }
}

HubServer::~HubServer() {
  stop();
}

void HubServer::start() {
  watcher_.start();
  // The CLI's record commands on this machine run here, so that only the daemon writes its
  // state directory (the files' records, or on a database pki/crl.pem and pki/clients). The
  // socket replaces one an earlier run left; only root and the hub's account are answered.
  admin_server_ = std::make_unique<net::AdminServer>(
      net::admin_socket_path(config_.state_dir),
      [this](const net::AdminRequest& request, const net::AdminServer::Progress&) {
        return run_admin_command(request);
      },
      log_, "hub");
  admin_server_->start();
  agent_server_->start();
  provider_server_->start();
  tunnels_.start_heartbeats();
}

void HubServer::stop() {
  if (admin_server_) {
    admin_server_->stop_accepting();
  }
  agent_server_->stop();
  provider_server_->stop();
  watcher_.stop();
}

net::AdminResult HubServer::run_admin_command(const net::AdminRequest& request) {
  if (request.command != "records") {
    return {.exit_code = 2, .output = {}, .error = "the hub runs record commands only\n"};
  }
  auto result = run_record_command(store_, config_, request.arguments,
                                   "(garm-edge-hub --help lists the commands)\n");
  if (result.exit_code == 0 && !request.arguments.empty()) {
    log_.info("ran `" + request.arguments.front() + "` for the operator's CLI");
    watcher_.check_now();  // a removal's tunnels close here now, not at the next tick
  }
  return {.exit_code = result.exit_code,
          .output = std::move(result.out),
          .error = std::move(result.err)};
}

std::size_t HubServer::open_connections() const {
  return agent_server_->open_connections() + provider_server_->open_connections();
}

HttpResponse HubServer::crl_answer() const {
  try {
    return {.status = 200,
            .content_type = "application/pkix-crl",
            .body = store_.crl_pem(),
            .headers = {}};
  } catch (const std::exception& e) {
    return error_answer(503, "unavailable", std::string("the CRL cannot be read: ") + e.what());
  }
}

HttpResponse HubServer::list_agents() const {
  json agents = json::array();
  const auto now = unix_now();
  for (const auto& agent : enrolled()) {
    json entry = {{"name", agent.name},
                  {"labels", agent.labels},
                  {"enrolled_at", agent.enrolled_at},
                  {"connected", false},
                  {"tunnels", 0}};
    std::int64_t not_after = 0;
    for (const auto& certificate : agent.certificates) {
      not_after = std::max(not_after, certificate.not_after);
    }
    entry["certificate_expires_in_seconds"] = not_after - now;
    if (const auto presence = tunnels_.presence(agent.name)) {
      entry["connected"] = presence->tunnels > 0;
      entry["tunnels"] = presence->tunnels;
      entry["version"] = presence->hello.version;
      entry["features"] = presence->hello.features;
      if (presence->last_seen) {
        entry["last_seen"] = format_rfc3339(*presence->last_seen);
      }
    }
    agents.push_back(std::move(entry));
  }
  return json_answer(200, {{"agents", agents}});
}

void HubServer::scrape_fleet(const std::string& reader, const net::TlsServer::Respond& respond) {
  if (++scrapes_in_flight_ > config_.metrics.max_in_flight) {
    --scrapes_in_flight_;
    return respond(error_answer(429, "too_many_scrapes",
                                "the hub is answering as many scrapes as [metrics] allows"));
  }
  // Counted out however the scrape ends: answered, or an exception on the way.
  const auto in_flight = std::shared_ptr<void>(nullptr, [this](void*) { --scrapes_in_flight_; });
  FleetView view{.enrolled = enrolled(),
                 .presence = tunnels_.presence(),
                 .pki = store_.pki(),
                 .probes_answered_by_hub = probes_answered_by_hub_.load(),
                 .probes_relayed = probes_relayed_.load(),
                 .placement_views = views_.size()};
  std::vector<std::string> connected;
  for (const auto& presence : view.presence) {
    const bool enrolled_now =
        std::any_of(view.enrolled.begin(), view.enrolled.end(),
                    [&](const auto& agent) { return agent.name == presence.name; });
    if (presence.tunnels > 0 && enrolled_now) {
      connected.push_back(presence.name);
    }
  }
  scrape_agents(
      tunnels_, connected, reader, config_.metrics,
      [respond, view = std::move(view), in_flight](std::map<std::string, AgentScrape> scrapes) {
        auto text = render_fleet_metrics(view, scrapes);
        respond({.status = 200,
                 .content_type = "text/plain; version=0.0.4",
                 .body = std::move(text),
                 .headers = {}});
      });
}

}  // namespace garm_edge::hub
