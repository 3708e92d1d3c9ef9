#include <algorithm>

#include <nlohmann/json.hpp>

#include "common/text.hpp"
#include "common/unix_time.hpp"
#include "hub/hub_server.hpp"
#include "hub/json_answer.hpp"
#include "net/pki.hpp"
#include "wire/identity.hpp"

// The listener agents dial: enrolment and renewal (hub/enrolment.cpp), the tunnels the hub
// sends requests over, and the watch on the agents directory that cuts a removed agent off.
namespace garm_edge::hub {
namespace {

using net::HttpRequest;
using net::HttpResponse;
using nlohmann::json;

constexpr std::chrono::milliseconds kWatchInterval{250};
constexpr unsigned kFullCheckTicks = 8;

}  // namespace

void HubServer::on_agent_request(HttpRequest request, const net::PeerIdentity& peer,
                                 const net::TlsServer::Respond& respond) {
  const auto route = request.method + " " + request.path;
  if (route == "GET /v1/ca") {
    return respond(
        {.status = 200, .content_type = "application/x-pem-file", .body = ca_pem_, .headers = {}});
  }
  if (route == "GET /healthz") {
    return respond(json_answer(200, {{"status", "ok"}}));
  }
  if (route == "GET /v1/crl") {
    return respond(crl_answer());
  }
  if (route == "POST /v1/enrol") {
    return respond(enrol(request, peer));
  }
  if (route == "POST /v1/renew") {
    return respond(renew(request, peer));
  }
  if (route == "POST /v1/tunnel") {
    return respond(open_tunnel(request, peer));
  }
  respond(error_answer(404, "no_such_endpoint", "no such endpoint"));
}

std::optional<AgentRecord> HubServer::enrolled_agent(const net::PeerIdentity& peer) const {
  if (peer.common_name.empty() || std::find(peer.uri_names.begin(), peer.uri_names.end(),
                                            agent_uri(peer.common_name)) == peer.uri_names.end()) {
    return std::nullopt;
  }
  auto agent = store_.agent(peer.common_name);
  if (!agent || !agent->accepts(peer.serial, unix_now())) {
    return std::nullopt;
  }
  return agent;
}

HttpResponse HubServer::open_tunnel(const HttpRequest& request, const net::PeerIdentity& peer) {
  const auto agent = enrolled_agent(peer);
  if (!agent) {
    auto refused = error_answer(403, "forbidden",
                                "this certificate is not an enrolled agent's (removed at the hub, "
                                "or never enrolled)");
    refused.close_connection = true;
    return refused;
  }
  AgentHello hello{.version = printable_excerpt(request.header("x-garm-edge-version").value_or("")),
                   .features = {}};
  const auto features = std::string(request.header("x-garm-edge-features").value_or(""));
  for (std::size_t at = 0; at < features.size() && hello.features.size() < 64;) {
    const auto comma = std::min(features.find(',', at), features.size());
    if (comma > at) {
      hello.features.push_back(printable_excerpt(features.substr(at, comma - at)));
    }
    at = comma + 1;
  }
  auto answer = json_answer(200, {{"agent", agent->name}});
  answer.take_over_tls = [this, name = agent->name, serial = peer.serial,
                          hello = std::move(hello)](std::shared_ptr<net::TlsStream> stream) {
    if (const auto presence = tunnels_.presence(name); !presence || presence->tunnels == 0) {
      views_.forget(name);  // back after a restart, perhaps another version: a new view first
    }
    tunnels_.add(name, serial, hello, std::move(stream));
  };
  return answer;
}

void HubServer::forget_enrolled() {
  std::lock_guard lock(enrolled_mutex_);
  enrolled_read_at_ = {};
}

std::vector<AgentRecord> HubServer::enrolled() const {
  const auto now = std::chrono::steady_clock::now();
  const auto generation = store_.agents_generation();
  std::lock_guard lock(enrolled_mutex_);
  if (generation != enrolled_generation_ || now - enrolled_read_at_ > std::chrono::seconds(1)) {
    enrolled_ = store_.agents();
    enrolled_generation_ = generation;
    enrolled_read_at_ = now;
  }
  return enrolled_;
}

void HubServer::watch_agents() {
  watch_timer_.expires_after(kWatchInterval);
  watch_timer_.async_wait([this](const asio::error_code& error) {
    if (error) {
      return;
    }
    // A change shows in the directory's change time; timestamps are coarse, so every few
    // seconds the tunnels are checked whether or not it moved.
    const auto generation = store_.agents_generation();
    if (generation != agents_generation_ || ++ticks_since_check_ >= kFullCheckTicks) {
      agents_generation_ = generation;
      ticks_since_check_ = 0;
      drop_revoked_tunnels();
      try {
        store_.refresh_crl(unix_now());
      } catch (const std::exception& e) {
        log_.warning(std::string("the CRL could not be refreshed: ") + e.what());
      }
      reload_if_crl_changed();
      refresh_placement_views();
    }
    watch_agents();
  });
}

void HubServer::drop_revoked_tunnels() {
  const auto now = unix_now();
  for (const auto& [name, serials] : tunnels_.serials()) {
    const auto agent = store_.agent(name);
    const bool revoked = std::any_of(serials.begin(), serials.end(), [&](const auto& serial) {
      return !agent || !agent->accepts(serial, now);
    });
    if (revoked) {
      log_.info("agent " + name + (agent ? " changed certificates" : " was removed") +
                ": closing its tunnels");
      tunnels_.drop(name);
      views_.forget(name);
    }
  }
}

}  // namespace garm_edge::hub
