// The guest service's relay of garm-agent's WebSocket.
#include <nlohmann/json.hpp>

#include "agent/guests/garm_agent.hpp"
#include "agent/guests/guest_endpoint_support.hpp"
#include "agent/guests/guest_service.hpp"
#include "common/text.hpp"
#include "net/http_syntax.hpp"
#include "net/secret_token.hpp"
#include "userdata/userdata.hpp"
#include "wire/json_fields.hpp"

namespace garm_edge::agent {

void GuestService::open_agent_socket(const net::HttpRequest& request, const std::string& source_ip,
                                     const Respond& respond) {
  const auto upgrade = request.header("upgrade");
  const auto token = bearer_token(request);
  const auto name = token ? agent_token_instance(*token) : std::nullopt;
  const auto entry = index_.instance_at(source_ip);
  const auto record = entry ? store_.get(entry->domain_name) : std::nullopt;
  if (request.method != "GET" || !upgrade ||
      !net::http_syntax::equals_ignoring_case(*upgrade, "websocket") || !name || !record ||
      record->intent != Intent::created || !record->guest || record->guest->ip != source_ip ||
      record->name != *name) {
    return respond(refuse(source_ip));
  }
  auto headers = websocket_headers([&](std::string_view n) { return request.header(n); },
                                   {{"authorization", "Authorization"},
                                    {"sec-websocket-key", "Sec-WebSocket-Key"},
                                    {"sec-websocket-version", "Sec-WebSocket-Version"},
                                    {"sec-websocket-protocol", "Sec-WebSocket-Protocol"},
                                    {"sec-websocket-extensions", "Sec-WebSocket-Extensions"},
                                    {"user-agent", "User-Agent"}});
  std::shared_ptr<net::WebSocketTunnel> tunnel;
  try {
    tunnel = relay_.open_websocket(upstream_agent_url(*record->guest),
                                   record->guest->ca_cert_bundle, headers);
  } catch (const std::exception& e) {
    ++counters_.relay_failures;
    log_.warning("agent socket for " + record->name + " to garm failed: " + e.what());
    return respond(bad_gateway());
  }
  const auto& answer = tunnel->answer();
  if (!tunnel->switched()) {
    if (answer.status == 401) {
      // The token named this instance, but garm did not issue it. garm-agent itself redials
      // every 5 s, so a stale token of its own stays under the 20 misses a minute.
      misses_.miss(source_ip);
    }
    return respond(answer_for_guest(answer, answer.body, nullptr));
  }
  ++counters_.agent_sockets;
  net::HttpResponse switching{
      .status = 101,
      .content_type = "",
      .body = "",
      .headers = websocket_headers([&](std::string_view n) { return answer.header(n); },
                                   {{"upgrade", "Upgrade"},
                                    {"connection", "Connection"},
                                    {"sec-websocket-accept", "Sec-WebSocket-Accept"},
                                    {"sec-websocket-protocol", "Sec-WebSocket-Protocol"},
                                    {"sec-websocket-extensions", "Sec-WebSocket-Extensions"}})};
  switching.upgrade = [this, tunnel, domain_name = record->domain_name, name = record->name](
                          UniqueFd socket, std::string early_bytes) {
    sockets_->carry(domain_name, name, tunnel, std::move(socket), std::move(early_bytes),
                    [this, &domain_name] { return index_.get(domain_name).has_value(); });
  };
  respond(std::move(switching));
}

}  // namespace garm_edge::agent
