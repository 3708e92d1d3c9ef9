#include <algorithm>

#include <nlohmann/json.hpp>

#include "common/text.hpp"
#include "common/unix_time.hpp"
#include "hub/hub_server.hpp"
#include "hub/json_answer.hpp"
#include "net/pki.hpp"
#include "wire/identity.hpp"

// The listener agents dial: enrolment and renewal (hub/enrolment.cpp), the tunnels the hub
// sends requests over, and what the state watcher's reads close: the tunnels of a removed
// agent.
namespace garm_edge::hub {
namespace {

using net::HttpRequest;
using net::HttpResponse;
using nlohmann::json;

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
  if (route == "GET /v1/hubs") {
    return respond(hubs_answer(peer));
  }
  respond(error_answer(404, "no_such_endpoint", "no such endpoint"));
}

std::optional<AgentRecord> HubServer::enrolled_agent(const net::PeerIdentity& peer) {
  if (peer.common_name.empty() || std::find(peer.uri_names.begin(), peer.uri_names.end(),
                                            agent_uri(peer.common_name)) == peer.uri_names.end()) {
    return std::nullopt;
  }
  return watcher_.accepting(peer.common_name, peer.serial, unix_now());
}

HttpResponse HubServer::hubs_answer(const net::PeerIdentity& peer) {
  if (!enrolled_agent(peer)) {
    return error_answer(403, "forbidden", "the hubs are told to enrolled agents only");
  }
  return json_answer(200, {{"hubs", watcher_.hub_urls()}});
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

void HubServer::on_state_read() {
  drop_revoked_tunnels();
  reload_if_crl_changed();
  refresh_placement_views();
}

void HubServer::drop_revoked_tunnels() {
  const auto now = unix_now();
  for (const auto& [name, serials] : tunnels_.serials()) {
    const auto agent = watcher_.known(name);
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
