#include "agent/daemon/serve.hpp"

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <malloc.h>
#include <system_error>
#include <thread>
#include <unistd.h>

#include "agent/api/host_metrics.hpp"
#include "agent/daemon/admin_commands.hpp"
#include "agent/daemon/descriptor_budget.hpp"
#include "common/prometheus_text.hpp"
#include "wire/agent_capacity.hpp"

#ifndef GARM_EDGE_VERSION
#define GARM_EDGE_VERSION "0.0.0"
#endif

namespace garm_edge::agent {
namespace {

// Commands already running finish in libvirt either way; their answers should reach garm, or
// garm retries work that was done.
constexpr auto kDrainDeadline = std::chrono::seconds(30);

/// The API's TLS config; with the hub's CRL too once the host joined one (it names the hosts
/// and clients the hub revoked, of the CA the API may trust).
std::shared_ptr<const net::TlsConfig> load_tls(const AgentConfig& config) {
  const auto& api = config.api;
  if (!api.enabled) {
    return nullptr;
  }
  return net::TlsConfig::load(net::TlsConfig::Role::server,
                              net::TlsFiles{.ca = api.ca,
                                            .crl = api.crl,
                                            .certificate = api.certificate,
                                            .key = api.key,
                                            .crls_when_present = {hub_crl_path(config.state_dir)}});
}

hypervisor::LibvirtOptions libvirt_options(const AgentConfig& config, Logger& log) {
  auto options = config.libvirt;
  options.on_connection_change = [&log](bool connected, const std::string& message) {
    connected ? log.info(message) : log.error(message);
  };
  return options;
}

net::TlsServerOptions tunnel_server_options() {
  net::TlsServerOptions options;
  // The hub asks every idle tunnel for /healthz every 10 s: one silent for longer than three
  // of those is a dead path, closed and dialed again.
  options.idle_timeout = std::chrono::seconds(35);
  options.request_timeout = std::chrono::seconds(30);
  options.max_connections = 64;
  return options;
}

/// Written beside `path` and renamed over it, so a reader never sees half of it.
void write_ready_file(const std::filesystem::path& path, const std::string& text) {
  auto temporary = path;
  temporary += ".tmp";
  {
    std::ofstream out(temporary, std::ios::trunc);
    out << text;
    if (!out.flush()) {
      throw std::system_error(std::make_error_code(std::errc::io_error),
                              "cannot write " + temporary.string());
    }
  }
  std::filesystem::rename(temporary, path);
}

/// How often the warm pool looks for guests to start, retire or expire.
constexpr std::chrono::seconds kWarmPoolInterval{5};
/// How often pulls that are due start (and what the images CLI pulled is picked up).
constexpr std::chrono::seconds kImagePullInterval{5};
/// How often due cache refreshes start and replaced generations no guest uses go.
constexpr std::chrono::seconds kCacheInterval{30};

std::unique_ptr<RunnerArchiveCache> make_runner_archive_cache(const AgentConfig& config,
                                                              const Clock& clock, Logger& log) {
  if (!config.guests.enabled || config.guests.runner_cache_mib == 0) {
    return nullptr;
  }
  return std::make_unique<RunnerArchiveCache>(
      ArchiveCacheOptions{.directory = config.state_dir / "runner-archives",
                          .max_bytes = config.guests.runner_cache_mib << 20U,
                          .failure_memory = std::chrono::seconds(30)},
      std::make_shared<HttpArchiveFetcher>(config.guests.runner_download_timeout), clock, log);
}

/// glibc gives each thread that allocates its own arena, up to 8 per core (2 on 32-bit); the
/// agent's ~35 threads mostly wait, and each arena keeps its own freed memory. Four arenas hold
/// 1,000 test-driver instances in 59.6 MB instead of 73.0, at the same handshakes/s; two cost a
/// fifth of the handshakes (mbedTLS allocates for every bignum), bench/compare.sh. Never above
/// glibc's own limit, and an operator's MALLOC_ARENA_MAX or arena_max tunable still wins.
void limit_malloc_arenas() {
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (std::getenv("MALLOC_ARENA_MAX") != nullptr ||
      (tunables != nullptr && std::strstr(tunables, "arena_max") != nullptr)) {
    return;
  }
  const long cores = std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN));
  const long glibc_default = (sizeof(long) > 4 ? 8 : 2) * cores;
  mallopt(M_ARENA_MAX, static_cast<int>(std::min(4L, glibc_default)));
}

}  // namespace

AgentDaemon::AgentDaemon(const AgentConfig& config, Logger& log, ServeOptions options)
    : config_(config),
      log_(log),
      options_(std::move(options)),
      tls_(load_tls(config)),
      hypervisor_(libvirt_options(config, log)),
      store_(config.state_dir),
      service_(config, hypervisor_, store_, clock_, log),
      images_(make_pulled_images(config, log)),
      mirror_(config.mirror.enabled ? std::make_unique<RegistryMirror>(config, log) : nullptr),
      caches_(make_job_caches(config, service_, clock_, log)),
      api_workers_(config.api.workers),
      runner_archives_(make_runner_archive_cache(config, clock_, log)),
      guest_access_(config, hypervisor_, log),
      agent_sockets_(AgentSockets::Options{}, log),
      guest_attachments_(guest_access_, guest_index_, runner_archives_.get(), &agent_sockets_),
      relay_(net::HttpClientOptions{.connect_timeout = std::chrono::seconds(5),
                                    .request_timeout = config.guests.relay_timeout}),
      guests_(config, service_, store_, guest_index_, guest_access_, relay_, runner_archives_.get(),
              &agent_sockets_, clock_, log),
      api_(config, service_),
      watchdog_timer_(io_),
      drain_timer_(io_) {
  if (mirror_) {
    mirror_->start();
    guests_.serve_mirror({.socket = mirror_->socket(), .blob_root = mirror_->blob_root()});
    api_.add_metrics_source([this] { return mirror_->render_metrics(); });
  }
  if (config.guests.enabled) {
    start_guest_service();
  }
  api_.add_metrics_source([this] { return render_link_metrics(); });
}

std::string AgentDaemon::render_link_metrics() const {
  std::vector<WatchedCertificate> certificates;
  if (config_.api.enabled) {
    certificates = {{.name = "api", .path = config_.api.certificate},
                    {.name = "api_ca", .path = config_.api.ca}};
  }
  const auto hub = hub_directory(config_.state_dir);
  certificates.push_back({.name = "hub_link", .path = hub / "agent.pem"});
  certificates.push_back({.name = "hub_ca", .path = hub / "ca.crt"});
  auto text = render_certificate_metrics(certificates);
  if (hub_link_) {
    const auto status = hub_link_->status();
    PrometheusText link;
    link.family("garm_edge_hub_link_tunnels", "gauge",
                "Tunnels this agent holds open to its hub: idle and carrying a request.");
    link.sample("garm_edge_hub_link_tunnels", {{"state", "idle"}},
                static_cast<std::uint64_t>(status.open - std::min(status.open, status.busy)));
    link.sample("garm_edge_hub_link_tunnels", {{"state", "busy"}},
                static_cast<std::uint64_t>(status.busy));
    link.family("garm_edge_hub_link_hubs", "gauge",
                "The fleet's hubs as this agent knows them, and those it holds a tunnel to.");
    link.sample("garm_edge_hub_link_hubs", {{"state", "known"}},
                static_cast<std::uint64_t>(status.hubs_known));
    link.sample("garm_edge_hub_link_hubs", {{"state", "connected"}},
                static_cast<std::uint64_t>(status.hubs_connected));
    link.family("garm_edge_hub_link_enrolled", "gauge", "1 when this host joined a hub.");
    link.sample("garm_edge_hub_link_enrolled", {}, std::uint64_t{status.enrolled ? 1u : 0u});
    text += link.str();
  }
  return text;
}

AgentDaemon::~AgentDaemon() {
  if (admin_) {
    admin_->stop_accepting();
  }
  warm_loop_.reset();  // no pass starts a create any more
  image_loop_.reset();
  cache_loop_.reset();
  if (caches_) {
    caches_->refresher().stop();  // builders under way are removed; the refresh counts failed
  }
  if (images_) {
    images_->store().stop();  // the downloads stay to resume at the next start
  }
  admin_.reset();  // an operator's pull it followed has ended with the store's
  if (guest_server_) {
    guest_server_->abandon_streams();  // the event loop is done: no guest reads them
  }
  api_workers_.join();
  if (guest_dispatcher_) {
    guest_dispatcher_->join();
  }
  guests_.stop_waiting();  // warm guests' polls: the event loop is done
  // No request can reach the cache now; downloads still under way call no one.
  runner_archives_.reset();
  if (mirror_) {
    mirror_->stop();  // no guest request reaches it any more
  }
}

int AgentDaemon::run() {
  start_admin_socket();  // from the first moment, the CLI asks this process
  reconcile_at_startup();
  reconcile_loop_ = std::make_unique<ReconcileLoop>(service_, config_.reconcile_interval, log_);
  start_image_pulls();
  start_cache_refreshes();
  start_warm_pool();
  start_control_api();
  start_hub_link();
  signals_.emplace(io_, SIGINT, SIGTERM, SIGHUP);
  wait_for_signal();
  announce_ready();
  if (systemd_.watchdog_interval()) {
    feed_watchdog();
  }
  std::thread second([this] { io_.run(); });
  io_.run();
  second.join();
  return 0;
}

void AgentDaemon::start_guest_service() {
  guest_access_.start();
  guest_dispatcher_ =
      std::make_unique<GuestDispatcher>(guests_, guest_index_, GuestDispatcher::Options{});
  guest_server_ = std::make_unique<net::HttpServer>(
      io_, guest_server_options(config_, guest_access_, guest_index_),
      [this](net::HttpRequest request, std::string peer, auto respond) {
        guest_dispatcher_->dispatch(std::move(request), std::move(peer), std::move(respond));
      });
  guest_server_->start();
  guest_access_.set_port(guest_server_->port());
  service_.serve_guests(guest_attachments_);
  api_.add_metrics_source([this] { return guests_.render_metrics(); });
  if (runner_archives_) {
    api_.add_metrics_source([this] { return runner_archives_->render_metrics(); });
  }
  log_.info("guest service listening on " + guest_access_.base_url() +
            (config_.guests.relay ? " (relay to garm)" : " (guests call garm directly)"));
}

void AgentDaemon::start_warm_pool() {
  if (config_.warm.empty() && service_.warm_guests().empty()) {
    return;  // with warm guests left from an earlier config, the pool retires them
  }
  warm_pool_ = std::make_unique<WarmPool>(service_, clock_, log_);
  api_.add_metrics_source([this] { return warm_pool_->render_metrics(); });
  warm_loop_ = std::make_unique<PeriodicLoop>(kWarmPoolInterval, [this] { warm_pool_->pass(); });
}

void AgentDaemon::start_image_pulls() {
  if (!images_) {
    return;
  }
  auto& store = images_->store();
  service_.use_image_bases(store);
  api_.add_metrics_source([&store] { return store.render_metrics(); });
  const auto pass = [this, &store] {
    try {
      store.tick();
      store.remove_unused([this](const std::string& path) { return service_.base_in_use(path); });
    } catch (const std::exception& e) {  // a full disk, a store error: the next pass tries again
      log_.error(std::string("image pulls: ") + e.what());
    }
  };
  pass();
  image_loop_ = std::make_unique<PeriodicLoop>(kImagePullInterval, pass);
}

void AgentDaemon::start_cache_refreshes() {
  if (!caches_) {
    return;
  }
  service_.use_cache_generations(*caches_);
  if (const auto left = service_.remove_builders(); left > 0) {
    log_.info("removed " + std::to_string(left) + " cache builders an earlier run left");
  }
  api_.add_metrics_source([this] { return render_cache_metrics(caches_->store(), clock_); });
  const auto pass = [this] {
    try {
      caches_->store().remove_unused(
          [this](const std::string& path) { return service_.generation_in_use(path); });
      caches_->refresher().start_due();
    } catch (const std::exception& e) {
      log_.error(std::string("caches: ") + e.what());
    }
  };
  pass();  // a cache with no generation yet is refreshed now, not a pass later
  cache_loop_ = std::make_unique<PeriodicLoop>(kCacheInterval, pass);
}

void AgentDaemon::start_admin_socket() {
  const auto path = net::admin_socket_path(config_.state_dir);
  try {
    admin_ = std::make_unique<net::AdminServer>(
        path,
        admin_commands(config_, service_, images_ ? &images_->store() : nullptr, caches_.get()),
        log_);
  } catch (const std::exception& e) {
    throw std::runtime_error(std::string("the admin socket: ") + e.what());
  }
  admin_->start();
}

void AgentDaemon::reconcile_at_startup() {
  if (const auto summary = summarize(service_.reconcile()); !summary.empty()) {
    log_.info("startup reconcile: " + summary);
  }
}

void AgentDaemon::start_control_api() {
  if (!config_.api.enabled) {
    log_.info(
        "no [api] section: the agent is served only through a hub it joined "
        "(garm-edge-agent join)");
    return;
  }
  api_server_ = std::make_unique<net::TlsServer>(
      io_, tls_server_options(config_.api), tls_,
      [this](net::HttpRequest request, net::PeerIdentity peer, auto respond) {
        api_.dispatch(std::move(request), std::move(peer), std::move(respond), api_workers_);
      });
  api_server_->start();
}

void AgentDaemon::start_hub_link() {
  tunnel_server_ = std::make_unique<net::TlsServer>(io_, tunnel_server_options(), nullptr,
                                                    net::TlsServer::Handler{});
  hub_link_ = std::make_unique<HubLink>(
      config_.state_dir, *tunnel_server_,
      [this](net::HttpRequest request, const net::PeerIdentity&, auto respond) {
        auto caller = caller_through_hub(request);
        api_.dispatch(std::move(request), std::move(caller), std::move(respond), api_workers_);
      },
      GARM_EDGE_VERSION, wire::kAgentFeatures, log_, HubLinkOptions{.on_crl_change = [this] {
        asio::post(io_, [this] { reload_certificates(); });
      }});
  hub_link_->start();
}

void AgentDaemon::announce_ready() {
  if (!api_server_) {
    if (!options_.ready_file.empty()) {
      write_ready_file(options_.ready_file,
                       "api_port=\nguest_url=" +
                           (guest_server_ ? guest_access_.base_url() : std::string()) + "\n");
    }
    systemd_.ready("serving through a hub");
    return;
  }
  const auto port = std::to_string(api_server_->port());
  log_.info("listening on " + config_.api.address + ":" + port + " (agent " + config_.agent_id +
            ")");
  if (!options_.ready_file.empty()) {
    write_ready_file(options_.ready_file,
                     "api_port=" + port + "\nguest_url=" +
                         (guest_server_ ? guest_access_.base_url() : std::string()) + "\n");
  }
  if (options_.on_listening) {
    options_.on_listening(api_server_->port());
  }
  systemd_.ready("serving: control API on " + config_.api.address + ":" + port +
                 (guest_server_ ? ", guests on " + guest_access_.base_url() : std::string()));
}

void AgentDaemon::wait_for_signal() {
  signals_->async_wait([this](const asio::error_code& error, int signal) {
    if (!error) {
      on_signal(signal);
    }
  });
}

void AgentDaemon::on_signal(int signal) {
  if (signal == SIGHUP) {
    reload_certificates();
    wait_for_signal();
    return;
  }
  begin_stopping();
}

void AgentDaemon::reload_certificates() {
  systemd_.reloading();
  try {
    if (!api_server_) {
      systemd_.ready("serving");
      return;  // the hub link reloads its own certificate when its file changes
    }
    api_server_->reload(load_tls(config_));
    log_.info("reloaded certificates, key, CA and CRL; new connections use them");
  } catch (const std::exception& e) {
    log_.error(std::string("reload failed, keeping the previous certificates: ") + e.what());
  }
  systemd_.ready("serving");
}

void AgentDaemon::begin_stopping() {
  systemd_.stopping();
  log_.info("stopping: no new connections; answering the ones in progress");
  if (hub_link_) {
    hub_link_->stop();
  }
  if (api_server_) {
    api_server_->stop();
  }
  if (guest_server_) {
    guest_server_->stop();
  }
  drain(std::chrono::steady_clock::now() + kDrainDeadline);
}

void AgentDaemon::drain(std::chrono::steady_clock::time_point deadline) {
  // Tunnels stay open until the hub closes them: only the API's own connections are waited for.
  if (!api_server_ || api_server_->open_connections() == 0 ||
      std::chrono::steady_clock::now() >= deadline) {
    watchdog_timer_.cancel();
    io_.stop();
    return;
  }
  drain_timer_.expires_after(std::chrono::milliseconds(50));
  drain_timer_.async_wait([this, deadline](const asio::error_code&) { drain(deadline); });
}

// Fed from the event loop that answers both APIs: if it stalls, systemd restarts the agent.
void AgentDaemon::feed_watchdog() {
  systemd_.watchdog();
  watchdog_timer_.expires_after(*systemd_.watchdog_interval());
  watchdog_timer_.async_wait([this](const asio::error_code& error) {
    if (!error) {
      feed_watchdog();
    }
  });
}

AgentConfig with_hub_clients(AgentConfig config) {
  if (!config.api.enabled) {
    // Served only through a hub: the hub checks which controllers a caller may act for.
    config.api.clients = {{.identity = std::string(kThroughHubIdentity), .controllers = {"*"}}};
  }
  return config;
}

int serve(const AgentConfig& config, Logger& log, ServeOptions options) {
  limit_malloc_arenas();  // before the daemon starts its threads
  ensure_descriptor_budget(config, log);
  const auto effective = with_hub_clients(config);
  AgentDaemon daemon(effective, log, std::move(options));
  return daemon.run();
}

}  // namespace garm_edge::agent
