#include "hub/hub_server.hpp"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "common/text.hpp"
#include "common/unix_time.hpp"
#include "net/http_syntax.hpp"
#include "net/pki.hpp"
#include "wire/identity.hpp"
#include "wire/join_token.hpp"
#include "wire/relay_framing.hpp"

namespace garm_edge::hub {
namespace {

using net::HttpRequest;
using net::HttpResponse;
using nlohmann::json;

constexpr std::chrono::milliseconds kWatchInterval{250};
constexpr unsigned kFullCheckTicks = 8;
constexpr std::size_t kMaxNames = 16;

HttpResponse json_answer(int status, const json& body) {
  return {.status = status, .content_type = "application/json", .body = body.dump(), .headers = {}};
}

HttpResponse error_answer(int status, const std::string& code, const std::string& message) {
  return json_answer(status, {{"code", code}, {"message", message}});
}

std::string iso8601(std::chrono::system_clock::time_point at) {
  const auto seconds = std::chrono::system_clock::to_time_t(at);
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char text[32] = {};
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

std::vector<std::string> name_list(const json& body, const char* key) {
  const auto found = body.find(key);
  if (found == body.end()) {
    return {};
  }
  auto names = found->get<std::vector<std::string>>();
  if (names.size() > kMaxNames) {
    throw Refused(std::string(key) + ": at most 16");
  }
  for (const auto& name : names) {
    if (name.empty() || name.size() > 253 ||
        name.find_first_not_of(
            "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-:") !=
            std::string::npos) {
      throw Refused(std::string(key) + ": \"" + printable_excerpt(name) + "\" is not a name");
    }
  }
  return names;
}

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

}  // namespace

bool EnrolmentLimiter::allowed(const std::string& address,
                               std::chrono::steady_clock::time_point now) {
  std::lock_guard lock(mutex_);
  const auto found = windows_.find(address);
  return found == windows_.end() || now - found->second.start >= std::chrono::minutes(1) ||
         found->second.failures < limit_;
}

void EnrolmentLimiter::failed(const std::string& address,
                              std::chrono::steady_clock::time_point now) {
  std::lock_guard lock(mutex_);
  auto& window = windows_[address];
  if (now - window.start >= std::chrono::minutes(1)) {
    window = {.start = now, .failures = 0};
  }
  ++window.failures;
  while (windows_.size() > kMaxAddresses) {
    windows_.erase(std::min_element(
        windows_.begin(), windows_.end(),
        [](const auto& a, const auto& b) { return a.second.start < b.second.start; }));
  }
}

HubServer::HubServer(asio::io_context& io, HubConfig config, Logger& log)
    : config_(std::move(config)),
      log_(log),
      store_(open_hub_store(config_)),
      tunnels_(io, config_.tunnels),
      limiter_(config_.enrolment_failures_per_minute),
      ca_pem_(store_.ca_pem()),
      watch_timer_(io) {
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
  agents_generation_ = store_.agents_generation();
  agent_server_->start();
  provider_server_->start();
  tunnels_.start_heartbeats();
  watch_agents();
}

void HubServer::stop() {
  agent_server_->stop();
  provider_server_->stop();
  watch_timer_.cancel();
}

std::size_t HubServer::open_connections() const {
  return agent_server_->open_connections() + provider_server_->open_connections();
}

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

HttpResponse HubServer::enrol(const HttpRequest& request, const net::PeerIdentity& peer) {
  const auto now = std::chrono::steady_clock::now();
  json body;
  std::string token_id;
  try {
    body = json::parse(request.body);
    token_id = body.at("token_id").get<std::string>();
  } catch (const json::exception&) {
    return error_answer(400, "invalid_argument",
                        "an enrolment is JSON with token_id, secret, name and request");
  }
  // Counted per address and token: hosts behind one NAT share an address, and guesses at one
  // token must not lock them out of another.
  const auto key = peer.address + "|" + (wire::is_token_id(token_id) ? token_id : std::string("?"));
  if (!limiter_.allowed(key, now)) {
    return error_answer(429, "too_many_failures",
                        "too many failed enrolments with this token from this address: wait a "
                        "minute");
  }
  try {
    const EnrolmentRequest enrolment{.token_id = token_id,
                                     .secret = body.at("secret").get<std::string>(),
                                     .name = body.value("name", std::string()),
                                     .request_pem = body.at("request").get<std::string>(),
                                     .dns_names = name_list(body, "dns_names"),
                                     .ip_addresses = name_list(body, "ip_addresses")};
    auto enrolled = store_.enrol(enrolment, unix_now());
    forget_enrolled();
    log_.info("enrolled agent " + enrolled.agent.name + " from " + peer.address + " with token " +
              enrolled.agent.token_id);
    return json_answer(200, {{"certificate", enrolled.certificate_pem},
                             {"ca", enrolled.ca_pem},
                             {"labels", enrolled.agent.labels},
                             {"name", enrolled.agent.name},
                             {"dns_names", enrolled.agent.dns_names},
                             {"ip_addresses", enrolled.agent.ip_addresses}});
  } catch (const Refused& e) {
    limiter_.failed(key, now);
    log_.warning("enrolment from " + peer.address + " refused: " + e.what());
    return error_answer(403, "refused", e.what());
  } catch (const json::exception&) {
    limiter_.failed(key, now);
    return error_answer(400, "invalid_argument",
                        "an enrolment is JSON with token_id, secret, name and request");
  }
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

HttpResponse HubServer::renew(const HttpRequest& request, const net::PeerIdentity& peer) {
  const auto agent = enrolled_agent(peer);
  if (!agent) {
    auto refused = error_answer(403, "forbidden", "this certificate is not an enrolled agent's");
    refused.close_connection = true;
    return refused;
  }
  try {
    const auto body = json::parse(request.body);
    auto renewed =
        store_.renew(agent->name, peer.serial, body.at("request").get<std::string>(), unix_now());
    log_.info("renewed the certificate of agent " + agent->name);
    return json_answer(200, {{"certificate", renewed.certificate_pem}, {"ca", renewed.ca_pem}});
  } catch (const Refused& e) {
    return error_answer(403, "refused", e.what());
  } catch (const json::exception&) {
    return error_answer(400, "invalid_argument", "a renewal is JSON with request");
  }
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
    tunnels_.add(name, serial, hello, std::move(stream));
  };
  return answer;
}

void HubServer::on_provider_request(HttpRequest request, const net::PeerIdentity& peer,
                                    const net::TlsServer::Respond& respond) {
  if (request.method == "GET" && request.path == "/healthz") {
    return respond(json_answer(200, {{"status", "ok"}}));
  }
  if (request.method == "GET" && request.path == "/v1/crl") {
    return respond(crl_answer());
  }
  if (request.method == "GET" && request.path == "/metrics") {
    if (const auto reader = wire::metrics_reader(peer.uri_names)) {
      return scrape_fleet(*reader, respond);
    }
    return respond(error_answer(403, "forbidden",
                                "/metrics is for a metrics reader's certificate (garm-edge-hub "
                                "issue-client NAME --role metrics)"));
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

namespace {

/// The request an agent gets over its tunnel, as `caller` (a [[clients]] entry): its identity,
/// and the controllers it may act for, so that the agent shows it only their warm guests.
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

/// What one relay to many agents may copy: its body once per agent named.
constexpr std::size_t kMaxFanOutBytes = 16 * 1024 * 1024;

constexpr std::size_t kMaxRelayTargets = 4096;
/// Below the 64 MiB a provider reads of one answer (net::HttpsClient).
constexpr std::size_t kMaxFramedBytes = 48 * 1024 * 1024;

}  // namespace

void HubServer::relay(const HttpRequest& request, const HubClient& caller,
                      const net::TlsServer::Respond& respond) {
  const auto& name = request.path;
  auto wire = relayed_request(request.method, request.target, name, request.body, caller);
  tunnels_.relay(name, caller.identity, std::move(wire), config_.relay_timeout,
                 [respond, name](std::optional<net::ClientResponse> answer,
                                 const std::string& error, bool sent) {
                   if (!answer) {
                     // The code tells the provider whether the agent may have acted on it.
                     return respond(error_answer(
                         502, sent ? "agent_unreachable" : "agent_not_connected", error));
                   }
                   respond({.status = answer->status,
                            .content_type = std::string(
                                answer->header("content-type").value_or("application/json")),
                            .body = std::move(answer->body),
                            .headers = {}});
                 });
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
  // The answers go back framed, not as JSON strings: nothing to escape or parse on either side,
  // and no agent's bytes can pass for another's (each part's length is the hub's count).
  struct Gathered {
    std::mutex mutex;
    std::string framed = std::string(wire::kRelayFraming) + "\n";
    std::size_t left = 0;
    net::TlsServer::Respond respond;
  };
  if (agents.empty()) {
    return respond({.status = 200,
                    .content_type = std::string(wire::kRelayContentType),
                    .body = std::string(wire::kRelayFraming) + "\n",
                    .headers = {}});
  }
  auto gathered = std::make_shared<Gathered>();
  gathered->left = agents.size();
  gathered->respond = respond;
  for (const auto& name : agents) {
    tunnels_.relay(
        name, client.identity, relayed_request(method, target, name, body, client), timeout,
        [gathered, name](std::optional<net::ClientResponse> answer, const std::string& error,
                         bool sent) {
          int status = answer ? answer->status : 0;
          std::string bytes = error;
          if (answer) {
            bytes = std::move(answer->body);
          }
          std::unique_lock lock(gathered->mutex);
          // The whole stays within what a provider reads: one agent's huge answer
          // fails that agent's part, named, not the answer of every agent.
          if (gathered->framed.size() + bytes.size() > kMaxFramedBytes) {
            bytes = "agent " + name + " answered " + std::to_string(bytes.size()) +
                    " bytes, more than this relay's answers may hold";
            status = 0;
          }
          gathered->framed += name + " " + std::to_string(status) + " " + (sent ? "1" : "0") + " " +
                              std::to_string(bytes.size()) + "\n" + bytes;
          if (--gathered->left > 0) {
            return;
          }
          auto framed = std::move(gathered->framed);
          lock.unlock();
          gathered->respond({.status = 200,
                             .content_type = std::string(wire::kRelayContentType),
                             .body = std::move(framed),
                             .headers = {}});
        });
  }
}

void HubServer::answer_safely(const net::TlsServer::Respond& respond,
                              const std::function<void()>& handle) {
  try {
    handle();
  } catch (const std::exception& e) {
    // The state directory unreadable, the CA key gone: an answer that says so, never an end of
    // the hub (this runs on its event loop).
    log_.error(std::string("a request failed: ") + e.what());
    respond(error_answer(500, "internal", std::string("the hub could not answer: ") + e.what()));
  }
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
        entry["last_seen"] = iso8601(*presence->last_seen);
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
  FleetView view{.enrolled = enrolled(), .presence = tunnels_.presence(), .pki = store_.pki()};
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
    }
  }
}

}  // namespace garm_edge::hub
