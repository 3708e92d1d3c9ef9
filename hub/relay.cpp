#include <algorithm>

#include <nlohmann/json.hpp>

#include "common/text.hpp"
#include "common/unix_time.hpp"
#include "hub/hub_server.hpp"
#include "hub/json_answer.hpp"
#include "hub/relayed_request.hpp"
#include "net/http_syntax.hpp"
#include "net/postgres_client.hpp"
#include "wire/relay_framing.hpp"

// The listener providers call: what a client may ask of agents through the hub, and the
// requests relayed to one agent or to many in one answer.
namespace garm_edge::hub {
namespace {

using net::HttpRequest;
using net::HttpResponse;
using nlohmann::json;

/// What a client may ask of agents through the hub, which speaks for it to agents that trust
/// the hub with every controller: its controllers' routes; of the host-wide ones, the capacity
/// and health a placement reads; the rest (draining, other controllers' warm guests, metrics)
/// only with controllers = ["*"].
std::optional<HttpResponse> refusal_for(const HubClient& client, const std::string& method,
                                        const std::string& target, const std::string& controller) {
  if (!controller.empty()) {
    if (client.allows(controller)) {
      return std::nullopt;
    }
    return error_answer(403, "forbidden",
                        "client \"" + client.identity + "\" may not act for controller " +
                            printable_excerpt(controller));
  }
  const auto path = target.substr(0, target.find('?'));
  if ((method == "GET" && (path == "/v1/capacity" || path == "/healthz")) || client.allows("*")) {
    return std::nullopt;
  }
  return error_answer(403, "forbidden",
                      "client \"" + client.identity + "\" may not " + method + " " + path +
                          " on an agent: that needs controllers = [\"*\"]");
}

/// The target relayed to an agent goes into a request line: only what a request target may
/// hold (no space, no control character: nothing that could end the line or start a request).
bool is_plain_target(std::string_view target) {
  return !target.empty() && target.front() == '/' && target.size() <= 8192 &&
         std::all_of(target.begin(), target.end(),
                     [](char c) { return net::http_syntax::is_target_char(c); });
}

/// The path relayed to an agent: plain segments only, so that the hub's reading of it (which
/// controller it acts for) is the agent's. Returns the controller segment, "" for none.
std::optional<std::string> controller_of(std::string_view path) {
  if (path.find_first_not_of(
          "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-/") !=
          std::string_view::npos ||
      path.find("//") != std::string_view::npos || path.find("/./") != std::string_view::npos ||
      path.find("/../") != std::string_view::npos || path.ends_with("/..") ||
      path.ends_with("/.")) {
    return std::nullopt;
  }
  constexpr std::string_view kControllers = "/v1/controllers/";
  if (!path.starts_with(kControllers)) {
    return std::string();
  }
  const auto rest = path.substr(kControllers.size());
  return ascii_lower(rest.substr(0, rest.find('/')));
}

/// What one relay to many agents may copy: its body once per agent named.
constexpr std::size_t kMaxFanOutBytes = 16 * 1024 * 1024;

constexpr std::size_t kMaxRelayTargets = 4096;
/// Below the 64 MiB a provider reads of one answer (net::HttpsClient).
constexpr std::size_t kMaxFramedBytes = 48 * 1024 * 1024;

/// The answers of a relay to many agents, as they come in: they go back framed, not as JSON
/// strings (nothing to escape or parse on either side, and no agent's bytes can pass for
/// another's: each part's length is the hub's count), once every agent's is in.
class GatheredAnswers {
 public:
  GatheredAnswers(std::size_t agents, net::TlsServer::Respond respond)
      : left_(agents), respond_(std::move(respond)) {}

  void add(const std::string& agent, int status, bool sent, std::string bytes) {
    std::unique_lock lock(mutex_);
    // The whole stays within what a provider reads: one agent's huge answer fails that
    // agent's part, named, not the answer of every agent.
    if (framed_.size() + bytes.size() > kMaxFramedBytes) {
      bytes = "agent " + agent + " answered " + std::to_string(bytes.size()) +
              " bytes, more than this relay's answers may hold";
      status = 0;
    }
    framed_ += agent + " " + std::to_string(status) + " " + (sent ? "1" : "0") + " " +
               std::to_string(bytes.size()) + "\n" + bytes;
    if (--left_ > 0) {
      return;
    }
    auto framed = std::move(framed_);
    lock.unlock();
    respond_({.status = 200,
              .content_type = std::string(wire::kRelayContentType),
              .body = std::move(framed),
              .headers = {}});
  }

 private:
  std::mutex mutex_;
  std::string framed_ = std::string(wire::kRelayFraming) + "\n";
  std::size_t left_;
  net::TlsServer::Respond respond_;
};

}  // namespace

std::string relayed_request(const std::string& method, const std::string& target,
                            const std::string& agent, const std::string& body,
                            const HubClient& caller) {
  std::string controllers;
  for (const auto& controller : caller.controllers) {
    controllers += (controllers.empty() ? "" : ",") + controller;
  }
  return method + " " + target + " HTTP/1.1\r\nHost: " + agent +
         "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\nX-Garm-Edge-Caller: " + caller.identity +
         "\r\nX-Garm-Edge-Caller-Controllers: " + controllers + "\r\n\r\n" + body;
}

void HubServer::on_provider_request(HttpRequest request, const net::PeerIdentity& peer,
                                    const net::TlsServer::Respond& respond) {
  const bool metrics_route = request.method == "GET" && request.path == "/metrics";
  if (const auto reader = wire::metrics_reader(peer.uri_names)) {
    if (metrics_route) {
      return scrape_fleet(*reader, respond);
    }
    return respond(error_answer(403, "forbidden",
                                "a metrics reader's certificate reads /metrics and nothing else"));
  }
  if (metrics_route) {
    return respond(error_answer(403, "forbidden",
                                "/metrics is for a metrics reader's certificate (garm-edge-hub "
                                "issue-client NAME --role metrics)"));
  }
  if (request.method == "GET" && request.path == "/healthz") {
    return respond(json_answer(200, {{"status", "ok"}}));
  }
  if (request.method == "GET" && request.path == "/v1/crl") {
    return respond(crl_answer());
  }
  // A host's certificate (or the hub's own) is no client, whatever its CN says.
  if (const auto refusal = wire::refusal_as_client(peer.uri_names)) {
    auto refused = error_answer(403, "forbidden", "this is " + *refusal);
    refused.close_connection = true;
    return respond(std::move(refused));
  }
  const auto* client = config_.find_client(peer.common_name);
  if (client == nullptr) {
    auto refused = error_answer(
        403, "forbidden",
        "client \"" + printable_excerpt(peer.common_name) + "\" is not in the hub's [[clients]]");
    refused.close_connection = true;
    return respond(std::move(refused));
  }
  if (request.method == "GET" && request.path == "/v1/agents") {
    return respond(list_agents());
  }
  if (request.method == "POST" && request.path == "/v1/relay") {
    return relay_to_many(request, *client, respond);
  }
  constexpr std::string_view kAgents = "/v1/agents/";
  if (request.target.starts_with(kAgents)) {
    const auto rest = std::string_view(request.target).substr(kAgents.size());
    const auto name = std::string(rest.substr(0, rest.find('/')));
    const auto relayed = rest.substr(std::min(rest.size(), name.size()));
    constexpr std::string_view kRelay = "/relay/";
    if (is_agent_name(name) && relayed.starts_with(kRelay)) {
      const auto target = std::string(relayed.substr(kRelay.size() - 1));
      const auto controller = controller_of(target.substr(0, target.find('?')));
      if (!controller) {
        return respond(error_answer(400, "invalid_argument",
                                    "the hub relays only plain paths (no percent-encoding, empty "
                                    "or dot segments)"));
      }
      if (const auto refusal = refusal_for(*client, request.method, target, *controller)) {
        return respond(*refusal);
      }
      HttpRequest inner = std::move(request);
      inner.target = target;
      inner.path = name;  // where it goes
      return relay(inner, *client, respond);
    }
  }
  respond(error_answer(404, "no_such_endpoint", "no such endpoint"));
}

void HubServer::relay(const HttpRequest& request, const HubClient& caller,
                      const net::TlsServer::Respond& respond) {
  const auto& name = request.path;
  auto wire = relayed_request(request.method, request.target, name, request.body, caller);
  Tunnels::Done done = [respond, name](std::optional<net::ClientResponse> answer,
                                       const std::string& error, bool sent) {
    if (!answer) {
      // The code tells the provider whether the agent may have acted on it.
      return respond(error_answer(502, sent ? "agent_unreachable" : "agent_not_connected", error));
    }
    respond(
        {.status = answer->status,
         .content_type = std::string(answer->header("content-type").value_or("application/json")),
         .body = std::move(answer->body),
         .headers = {}});
  };
  watch_instance_changes(request, name, done);
  tunnels_.relay(name, caller.identity, std::move(wire), config_.relay_timeout, std::move(done));
}

void HubServer::relay_to_many(const HttpRequest& request, const HubClient& client,
                              const net::TlsServer::Respond& respond) {
  std::string method;
  std::string target;
  std::string body;
  std::vector<std::string> agents;
  std::chrono::milliseconds timeout = config_.relay_timeout;
  try {
    const auto fields = json::parse(request.body);
    method = fields.at("method").get<std::string>();
    target = fields.at("target").get<std::string>();
    body = fields.value("body", std::string());
    // "*": every enrolled agent, so that a provider learns the hub's agents and their answers
    // in one round trip.
    if (fields.at("agents") == "*") {
      for (const auto& agent : enrolled()) {
        agents.push_back(agent.name);
      }
    } else {
      agents = fields.at("agents").get<std::vector<std::string>>();
      // One request per agent, however often it is named: a caller must not fan one relay out
      // into thousands of requests to one agent.
      std::sort(agents.begin(), agents.end());
      agents.erase(std::unique(agents.begin(), agents.end()), agents.end());
    }
    if (const auto ms = fields.value("timeout_ms", std::int64_t{0}); ms > 0) {
      timeout = std::min(timeout, std::chrono::milliseconds(ms));
    }
  } catch (const json::exception&) {
    return respond(error_answer(400, "invalid_argument",
                                "a relay is JSON with method, target, agents and an optional body "
                                "and timeout_ms"));
  }
  const bool names_ok = std::all_of(agents.begin(), agents.end(),
                                    [](const auto& name) { return is_agent_name(name); });
  const bool method_ok = method == "GET" || method == "POST" || method == "DELETE";
  const auto controller = controller_of(target.substr(0, target.find('?')));
  if (!names_ok || !method_ok || agents.size() > kMaxRelayTargets || !controller ||
      !is_plain_target(target) || body.size() * agents.size() > kMaxFanOutBytes) {
    return respond(error_answer(400, "invalid_argument",
                                "a relay names agents, GET, POST or DELETE and a plain path"));
  }
  if (const auto refusal = refusal_for(client, method, target, *controller)) {
    return respond(*refusal);
  }
  if (agents.empty()) {
    return respond({.status = 200,
                    .content_type = std::string(wire::kRelayContentType),
                    .body = std::string(wire::kRelayFraming) + "\n",
                    .headers = {}});
  }
  auto gathered = std::make_shared<GatheredAnswers>(agents.size(), respond);
  // A placement probe: the hub answers for every agent whose view shows it cannot hold the
  // instance; only the others are asked.
  const auto probed = probed_instance(method, target);
  const auto now = PlacementViews::Clock::now();
  HttpRequest relayed;  // what placement watches of it: creates and deletes
  relayed.method = method;
  relayed.target = target;
  relayed.body = body;
  for (const auto& name : agents) {
    if (probed) {
      const auto presence = tunnels_.presence(name);
      if (presence && presence->tunnels > 0) {
        if (auto answer =
                views_.answer(name, probed->controller, probed->name, now, probed->fresh_share)) {
          ++probes_answered_by_hub_;
          gathered->add(name, 200, true, std::move(*answer));
          continue;
        }
      }
      ++probes_relayed_;
    }
    Tunnels::Done done = [gathered, name](std::optional<net::ClientResponse> answer,
                                          const std::string& error, bool sent) {
      if (!answer) {
        return gathered->add(name, 0, sent, error);
      }
      gathered->add(name, answer->status, sent, std::move(answer->body));
    };
    watch_instance_changes(relayed, name, done);
    tunnels_.relay(name, client.identity, relayed_request(method, target, name, body, client),
                   timeout, std::move(done));
  }
}

void HubServer::answer_safely(const net::TlsServer::Respond& respond,
                              const std::function<void()>& handle) {
  try {
    handle();
  } catch (const net::PostgresError& e) {
    // The database restarting: the caller tries again (an agent's next dial, garm's retry).
    log_.error(std::string("a request failed, the hub's records cannot be reached: ") + e.what());
    respond(error_answer(503, "unavailable",
                         "the hub's records cannot be reached just now: try again"));
  } catch (const std::exception& e) {
    // The state directory unreadable, the CA key gone: an answer that says so, never an end of
    // the hub (this runs on its event loop).
    log_.error(std::string("a request failed: ") + e.what());
    respond(error_answer(500, "internal", std::string("the hub could not answer: ") + e.what()));
  }
}

}  // namespace garm_edge::hub
