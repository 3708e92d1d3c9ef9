#include "agent/api/control_api.hpp"

#include <algorithm>
#include <optional>

#include <nlohmann/json.hpp>

#include "agent/api/capacity_answer.hpp"
#include "agent/api/host_metrics.hpp"
#include "agent/instances/cache_generations.hpp"
#include "agent/instances/warm_spec.hpp"
#include "common/text.hpp"
#include "wire/agent_capacity.hpp"
#include "wire/bootstrap.hpp"
#include "wire/error.hpp"
#include "wire/identity.hpp"
#include "wire/json_fields.hpp"
#include "wire/provider_instance.hpp"
#include "wire/schemas.hpp"
#include "wire/validate.hpp"

#ifndef GARM_EDGE_VERSION
#define GARM_EDGE_VERSION "0.0.0"
#endif

namespace garm_edge::agent {
namespace {

using net::HttpResponse;
using nlohmann::ordered_json;

/// What a command does to or shows of the whole host, for the refusal of a client that may not
/// act for every controller; nullptr for a command of narrower reach.
const char* whole_host_action(const ApiCommand& command) {
  if (std::holds_alternative<SetDraining>(command)) {
    return "drain this host";
  }
  if (std::holds_alternative<PullImage>(command)) {
    return "pull images";
  }
  if (std::holds_alternative<ShowPlacementView>(command)) {
    return "read every controller's placement view";
  }
  return nullptr;
}

HttpResponse json_response(int status, const ordered_json& body) {
  return HttpResponse{.status = status,
                      .content_type = "application/json",
                      .body = wire::to_go_json_text(body),
                      .headers = {}};
}

/// Messages may quote what the client sent; the excerpt keeps them valid UTF-8, which the JSON
/// serializer insists on.
HttpResponse error_response(int status, std::string_view code, const std::string& message) {
  constexpr std::size_t kMaxMessageBytes = 4096;
  return json_response(
      status,
      ordered_json{{"code", code}, {"message", printable_excerpt(message, kMaxMessageBytes)}});
}

ordered_json guest_json(const GuestRecord& guest) {
  auto messages = ordered_json::array();
  for (const auto& m : guest.messages) {
    messages.push_back({{"time", m.time}, {"status", m.status}, {"message", m.message}});
  }
  return {{"network", guest.network},
          {"mac", guest.mac},
          {"address", guest.ip},
          {"seed_served_at", guest.seed_served_at},
          {"access_closed", guest.closed},
          {"runner_status", guest.runner_status},
          {"agent_id", guest.agent_id ? ordered_json(*guest.agent_id) : ordered_json()},
          {"os_name", guest.os_name},
          {"os_version", guest.os_version},
          {"messages", messages}};
}

/// Each phase with its time and its seconds from the start.
ordered_json startup_json(const StartupTimeline& timeline) {
  auto phases = ordered_json::array();
  for (const auto& [phase, at] : timeline.marks) {
    phases.push_back({{"phase", to_string(phase)},
                      {"time", format_rfc3339(at)},
                      {"after_seconds",
                       std::chrono::duration<double>(at - timeline.marks.front().second).count()}});
  }
  return {
      {"start", timeline.labels.start()},
      {"phases", phases},
      {"failure", timeline.failure ? ordered_json(to_string(*timeline.failure)) : ordered_json()},
      {"summary", timeline.summary()}};
}

int status_for(ServiceError::Code code) {
  switch (code) {
    case ServiceError::Code::invalid_argument:
      return 400;
    case ServiceError::Code::not_found:
      return 404;
    case ServiceError::Code::conflict:
      return 409;
    case ServiceError::Code::unavailable:
    case ServiceError::Code::no_capacity:
    case ServiceError::Code::draining:
      return 503;
    case ServiceError::Code::timeout:
      return 504;
    case ServiceError::Code::internal:
      return 500;
  }
  return 500;
}

}  // namespace

ControlApi::ControlApi(const AgentConfig& config, InstanceService& service)
    : config_(config), service_(service) {}

net::HttpResponse ControlApi::handle(const net::HttpRequest& request,
                                     const net::PeerIdentity& peer) {
  const auto started = std::chrono::steady_clock::now();
  std::string_view route_name = "unknown";
  HttpResponse response;
  try {
    response = answer(request, peer, route_name);
  } catch (...) {
    // Rendering an error failed too: still an answer, never an end of the process.
    metrics_.record_error("internal");
    response =
        HttpResponse{.status = 500,
                     .content_type = "application/json",
                     .body = R"({"code":"internal","message":"the answer could not be rendered"})",
                     .headers = {}};
  }
  // Only known methods become labels: a client must not be able to grow the metrics at will.
  const bool known_method =
      request.method == "GET" || request.method == "POST" || request.method == "DELETE";
  metrics_.record(route_name, known_method ? std::string_view(request.method) : "other",
                  response.status, std::chrono::steady_clock::now() - started);
  return response;
}

namespace {

/// Whose share of the workers a request takes: its client certificate's. Not the controller
/// its path names: a client allowed several (or "*") could spread its requests over many.
std::string work_key(const net::PeerIdentity& peer) {
  std::string key = peer.common_name;
  for (const auto& uri : peer.uri_names) {
    key += "\n" + uri;
  }
  return key;
}

}  // namespace

void ControlApi::dispatch(net::HttpRequest request, net::PeerIdentity peer,
                          net::TlsServer::Respond respond, FairWorkQueue& workers) {
  if (request.method == "GET" && request.path == "/healthz") {
    return respond(handle(request, peer));
  }
  auto key = work_key(peer);
  workers.post(key, [this, request = std::move(request), peer = std::move(peer),
                     respond = std::move(respond)] { respond(handle(request, peer)); });
}

net::HttpResponse ControlApi::answer(const net::HttpRequest& request, const net::PeerIdentity& peer,
                                     std::string_view& route_name) {
  try {
    return route(request, peer, route_name);
  } catch (const ServiceError& e) {
    metrics_.record_error(to_string(e.code()));
    return error_response(status_for(e.code()), to_string(e.code()), e.what());
  } catch (const wire::WireError& e) {
    metrics_.record_error("invalid_argument");
    return error_response(400, "invalid_argument", e.what());
  } catch (const std::exception& e) {
    metrics_.record_error("internal");
    return error_response(500, "internal", e.what());
  }
}

net::TlsServerOptions tls_server_options(const ApiConfig& api) {
  net::TlsServerOptions options;
  options.address = api.address;
  options.port = api.port;
  options.allow = api.allow;
  options.max_connections = api.max_connections;
  return options;
}

net::HttpResponse ControlApi::route(const net::HttpRequest& request, const net::PeerIdentity& peer,
                                    std::string_view& route_name) {
  const auto parts = split_path(request.path);
  if (!parts) {
    return error_response(400, "invalid_argument",
                          "the path holds a malformed percent-encoding, invalid UTF-8 or a "
                          "control character");
  }
  std::vector<std::string> identities = peer.uri_names;
  identities.push_back(peer.common_name);
  // Anything under /v1, and the metrics, are for known clients only, whether or not the
  // endpoint exists; a host's or the hub's certificate is no client whatever its CN says (a
  // join token must not make garm).
  const bool under_v1 = !parts->empty() && parts->front() == "v1";
  // From the parsed path, as the route is matched: "/metrics/", "//metrics" and "/%6Detrics"
  // reach the same command and must meet the same checks.
  const bool metrics_path = parts->size() == 1 && parts->front() == "metrics";
  // A metrics reader (Prometheus, directly or through the hub's fleet scrape) reads /metrics
  // and nothing else, without an [[api.clients]] entry.
  if (request.method == "GET" && metrics_path && wire::metrics_reader(peer.uri_names)) {
    route_name = "metrics";
    return run(ShowMetrics{});
  }
  const bool for_clients = under_v1 || metrics_path;
  if (const auto refusal = wire::refusal_as_client(peer.uri_names); for_clients && refusal) {
    route_name = "forbidden";
    auto refused = error_response(403, "forbidden", "this is " + *refusal);
    refused.close_connection = true;
    return refused;
  }
  if (for_clients && !config_.api.knows(identities)) {
    route_name = "forbidden";
    auto refused = error_response(
        403, "forbidden",
        "client \"" + printable_excerpt(peer.common_name) + "\" is not in [[api.clients]]");
    refused.close_connection = true;  // it holds no share of the connections of listed clients
    return refused;
  }
  // The metrics name every controller's pools and caches: a client of some controllers only
  // must not read them (through a hub, the hub must vouch for every controller too).
  if (metrics_path && !sees_every_controller(identities, peer)) {
    route_name = "forbidden";
    return error_response(403, "forbidden",
                          "client \"" + printable_excerpt(peer.common_name) +
                              "\" may not read /metrics: it names every controller's pools and "
                              "caches, so it needs controllers = [\"*\"] or a metrics "
                              "certificate");
  }
  // Anything under a controller is for its clients only, whether or not the endpoint exists, and
  // they are told so before the rest of the request is read.
  std::optional<ControllerId> controller;
  if (under_v1 && parts->size() >= 3 && (*parts)[1] == "controllers") {
    controller = ControllerId::parse((*parts)[2], "controller ID in the path");
    if (controller->str() == kWarmControllerId || controller->str() == kCacheBuilderControllerId) {
      // Unbound warm guests and cache builders are no client's, not even a "*" one's.
      route_name = "forbidden";
      return error_response(403, "forbidden",
                            "controller " + controller->str() +
                                " is the agent's own, for warm guests not yet bound and cache "
                                "builders");
    }
    if (!config_.api.allows(identities, *controller)) {
      route_name = "forbidden";
      return error_response(403, "forbidden",
                            "client \"" + printable_excerpt(peer.common_name) +
                                "\" may not act for controller " + controller->str());
    }
  }
  const auto match = match_route(request.method, *parts);
  if (!match) {
    // Not not_found: a provider must never take a missing endpoint for a missing instance.
    return error_response(404, "no_such_endpoint", "no such endpoint");
  }
  route_name = match->route->name;
  RouteArgs args{.controller = controller, .text = match->segments};
  if (match->route->has_controller()) {
    args.text.erase(args.text.begin());  // the controller, parsed above
  }
  const auto command = match->route->parse(args, request);
  route_name = route_of(command);  // dry runs are told from creates only now
  if (const auto* whole_host = whole_host_action(command);
      whole_host != nullptr && !sees_every_controller(identities, peer)) {
    return error_response(403, "forbidden",
                          "client \"" + printable_excerpt(peer.common_name) + "\" may not " +
                              whole_host + ": that needs controllers = [\"*\"]");
  }
  // Warm guests belong to controllers: a client sees only those it may act for (through a hub,
  // also only those the hub lets it act for: the agent trusts the hub with every controller).
  const auto vouched = wire::controllers_vouched_by_hub(peer.uri_names);
  const ControllerFilter may_see = [&](const std::string& owner) {
    const bool hub_allows =
        !vouched || std::any_of(vouched->begin(), vouched->end(), [&](const auto& allowed) {
          return allowed == "*" || allowed == owner;
        });
    return hub_allows && config_.api.allows(identities, owner);
  };
  return std::visit(
      [&](const auto& c) {
        using Command = std::decay_t<decltype(c)>;
        if constexpr (std::is_same_v<Command, ShowCapacity> || std::is_same_v<Command, ListWarm> ||
                      std::is_same_v<Command, RefreshCache>) {
          return run(c, may_see);
        } else {
          return run(c);
        }
      },
      command);
}

bool ControlApi::sees_every_controller(const std::vector<std::string>& identities,
                                       const net::PeerIdentity& peer) const {
  const auto vouched = wire::controllers_vouched_by_hub(peer.uri_names);
  return config_.api.allows_every_controller(identities) &&
         (!vouched || std::find(vouched->begin(), vouched->end(), "*") != vouched->end());
}

net::HttpResponse ControlApi::run(const Health&) {
  if (const auto libvirt = service_.health(); !libvirt.reachable) {
    return json_response(503,
                         {{"status", "unavailable"},
                          {"libvirt", "unreachable: " + printable_excerpt(libvirt.detail, 512)}});
  }
  return json_response(200, {{"status", "ok"}});
}

net::HttpResponse ControlApi::run(const ShowMetrics&) {
  auto text = metrics_.render(service_.count_by_state());
  text += render_host_metrics(service_);
  text += service_.startup().render_metrics();
  for (const auto& source : metrics_sources_) {
    text += source();
  }
  return HttpResponse{.status = 200,
                      .content_type = "text/plain; version=0.0.4",
                      .body = std::move(text),
                      .headers = {}};
}

net::HttpResponse ControlApi::run(const ListImages&) {
  return json_response(200, wire::to_json(image_offers(config_, service_.image_bases())));
}

net::HttpResponse ControlApi::run(const ListFlavors&) {
  return json_response(200, wire::to_json(flavor_offers(config_)));
}

net::HttpResponse ControlApi::run(const ShowCapacity&, const ControllerFilter& shown) {
  return json_response(
      200, wire::to_json(capacity_answer(config_, service_.capacity(), service_.image_bases(),
                                         service_.cache_generations(), shown)));
}

net::HttpResponse ControlApi::run(const ShowPlacementView&) {
  return json_response(
      200, wire::to_json(placement_view(config_, service_.capacity(), service_.image_bases(),
                                        service_.cache_generations())));
}

net::HttpResponse ControlApi::run(const ListWarm&, const ControllerFilter& shown) {
  auto guests = ordered_json::array();
  for (const auto& record : service_.warm_guests()) {
    if (!shown(record.warm->controller)) {
      continue;
    }
    guests.push_back({{"name", record.name},
                      {"provider_id", record.domain_uuid},
                      {"image", record.image},
                      {"flavor", record.flavor},
                      {"controller", record.warm->controller},
                      {"state", to_string(record.warm->state)},
                      {"created_at", record.created_at},
                      {"ready_at", record.warm->ready_at},
                      {"address", record.guest ? record.guest->ip : ""}});
  }
  return json_response(200, guests);
}

net::HttpResponse ControlApi::run(const SetDraining& command) {
  service_.set_draining(command.draining);
  return json_response(200, {{"draining", service_.draining()}});
}

net::HttpResponse ControlApi::run(const PullImage& command) {
  auto* images = service_.image_bases();
  if (images == nullptr || !images->pulls(command.image)) {
    return error_response(400, "invalid_argument",
                          "image \"" + command.image + "\" has no source on this agent");
  }
  const bool started = images->pull(command.image);
  return json_response(
      202, {{"image", command.image}, {"pull", started ? "started" : "under way already"}});
}

net::HttpResponse ControlApi::run(const RefreshCache& command, const ControllerFilter& allowed) {
  auto* caches = service_.cache_generations();
  const auto* cache = config_.find_cache(command.cache);
  if (caches == nullptr || cache == nullptr || !allowed(cache->controller)) {
    // The same answer for another controller's cache: a client learns nothing of theirs.
    return error_response(400, "invalid_argument",
                          "this agent has no cache \"" + command.cache + "\" for this client");
  }
  const bool started = caches->refresh(command.cache);
  return json_response(
      202, {{"cache", command.cache}, {"refresh", started ? "started" : "under way already"}});
}

net::HttpResponse ControlApi::run(const ExtraSpecsSchema&) {
  return HttpResponse{.status = 200,
                      .content_type = "application/schema+json",
                      .body = wire::extra_specs_json_schema(),
                      .headers = {}};
}

net::HttpResponse ControlApi::run(const ConfigSchema&) {
  return HttpResponse{.status = 200,
                      .content_type = "application/schema+json",
                      .body = agent_config_json_schema(),
                      .headers = {}};
}

net::HttpResponse ControlApi::run(const CreateInstance& command) {
  const auto warm_use =
      command.warm_only ? InstanceService::WarmUse::only : InstanceService::WarmUse::preferred;
  return json_response(
      200, wire::to_json(service_.create(command.controller, command.bootstrap, warm_use)));
}

net::HttpResponse ControlApi::run(const DryRunCreate& command) {
  const auto dry = service_.dry_run_create(command.controller, command.bootstrap);
  return json_response(200, {{"already_exists", dry.already_exists},
                             {"domain_name", dry.domain_name},
                             {"domain_xml", dry.domain_xml},
                             {"volume_xml", dry.volume_xml},
                             {"user_data", dry.user_data},
                             {"instance", wire::to_json(dry.instance)}});
}

net::HttpResponse ControlApi::run(const GetInstance& command) {
  const auto instance = service_.get(command.controller, command.instance);
  if (!instance) {
    return error_response(404, "not_found", "no instance " + command.instance.str());
  }
  return json_response(200, wire::to_json(*instance));
}

net::HttpResponse ControlApi::run(const ShowPlacement& command) {
  const wire::PlacementAnswer answer{
      .instance = service_.get(command.controller, command.instance),
      .create_under_way = service_.create_under_way(command.controller, command.instance.str()),
      .capacity = capacity_answer(
          config_, service_.capacity(), service_.image_bases(), service_.cache_generations(),
          [&](const std::string& controller) { return controller == command.controller.str(); },
          command.controller.str())};
  return json_response(200, wire::to_json(answer));
}

net::HttpResponse ControlApi::run(const GetGuest& command) {
  const auto guest = service_.guest_status(command.controller, command.instance);
  if (!guest) {
    return error_response(404, "not_found",
                          "no instance " + command.instance.str() + " with guest access");
  }
  auto body = guest_json(*guest);
  if (const auto startup = service_.startup_timeline(command.controller, command.instance)) {
    body["startup"] = startup_json(*startup);
  }
  return json_response(200, body);
}

net::HttpResponse ControlApi::run(const ListInstances& command) {
  return json_response(200, wire::to_json(service_.list(command.controller, command.pool)));
}

net::HttpResponse ControlApi::run(const ListEvents& command) {
  auto events = ordered_json::array();
  for (const auto& event : service_.events().recent(command.controller, command.instance)) {
    events.push_back({{"time", event.time},
                      {"event", event.event},
                      {"instance", event.instance},
                      {"detail", event.detail}});
  }
  return json_response(200, events);
}

net::HttpResponse ControlApi::run(const DeleteInstance& command) {
  return json_response(200, {{"deleted", service_.remove(command.controller, command.instance)}});
}

net::HttpResponse ControlApi::run(const DeleteAllInstances& command) {
  return json_response(200, {{"removed", service_.remove_all(command.controller)}});
}

net::HttpResponse ControlApi::run(const StartInstance& command) {
  service_.start(command.controller, command.instance);
  return json_response(200, {{"ok", true}});
}

net::HttpResponse ControlApi::run(const StopInstance& command) {
  service_.stop(command.controller, command.instance, command.force);
  return json_response(200, {{"ok", true}});
}

net::HttpResponse ControlApi::run(const ValidatePool& command) {
  service_.validate_pool(command.controller, command.pool);
  return json_response(200, {{"valid", true}});
}

}  // namespace garm_edge::agent
