#include "agent/api/control_api.hpp"

#include <sstream>

#include <nlohmann/json.hpp>

#include "common/text.hpp"
#include "wire/bootstrap.hpp"
#include "wire/error.hpp"
#include "wire/json_fields.hpp"
#include "wire/provider_instance.hpp"
#include "wire/schemas.hpp"
#include "wire/validate.hpp"

namespace garm_edge::agent {
namespace {

using net::HttpResponse;
using nlohmann::ordered_json;

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

int status_for(ServiceError::Code code) {
  switch (code) {
    case ServiceError::Code::invalid_argument:
      return 400;
    case ServiceError::Code::not_found:
      return 404;
    case ServiceError::Code::conflict:
      return 409;
    case ServiceError::Code::unavailable:
      return 503;
    case ServiceError::Code::timeout:
      return 504;
    case ServiceError::Code::internal:
      return 500;
  }
  return 500;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  if (c >= 'A' && c <= 'F')
    return c - 'A' + 10;
  return -1;
}

/// Percent-decodes one path segment; nothing for malformed escapes or a NUL.
std::optional<std::string> decode_segment(std::string_view segment) {
  std::string out;
  for (std::size_t i = 0; i < segment.size(); ++i) {
    if (segment[i] != '%') {
      out += segment[i];
      continue;
    }
    if (i + 2 >= segment.size()) {
      return std::nullopt;
    }
    const int high = hex_value(segment[i + 1]);
    const int low = hex_value(segment[i + 2]);
    if (high < 0 || low < 0 || (high == 0 && low == 0)) {
      return std::nullopt;
    }
    out += static_cast<char>(high * 16 + low);
    i += 2;
  }
  return out;
}

std::optional<std::vector<std::string>> split_path(std::string_view path) {
  std::vector<std::string> parts;
  std::size_t start = 1;  // the path starts with '/'
  while (start <= path.size()) {
    const auto slash = path.find('/', start);
    const auto segment = path.substr(
        start, slash == std::string_view::npos ? std::string_view::npos : slash - start);
    if (!segment.empty()) {
      auto decoded = decode_segment(segment);
      // Names, IDs and pool IDs are text: refused here, no invalid UTF-8 travels further in.
      if (!decoded || !is_plain_text(*decoded)) {
        return std::nullopt;
      }
      parts.push_back(std::move(*decoded));
    }
    if (slash == std::string_view::npos) {
      break;
    }
    start = slash + 1;
  }
  return parts;
}

/// The percent-decoded value of `name` in the query string; nothing when absent. A value that
/// is malformed or not plain text is the client's error, never read as "absent".
std::optional<std::string> query_value(const net::HttpRequest& request, std::string_view name) {
  std::string_view query = request.query;
  while (!query.empty()) {
    const auto amp = query.find('&');
    const auto pair = query.substr(0, amp);
    if (pair.size() > name.size() && pair.starts_with(name) && pair[name.size()] == '=') {
      auto value = decode_segment(pair.substr(name.size() + 1));
      if (!value || !is_plain_text(*value)) {
        throw wire::WireError("query parameter " + std::string(name),
                              "malformed percent-encoding, invalid UTF-8 or a control character");
      }
      return value;
    }
    if (amp == std::string_view::npos) {
      break;
    }
    query.remove_prefix(amp + 1);
  }
  return std::nullopt;
}

bool query_flag(const net::HttpRequest& request, std::string_view name) {
  return query_value(request, name).value_or("") == "true";
}

ordered_json images_json(const AgentConfig& config) {
  ordered_json images = ordered_json::array();
  for (const auto& image : config.images) {
    images.push_back({{"name", image.name},
                      {"os_type", wire::to_string(image.os_type)},
                      {"os_name", image.os_name},
                      {"os_version", image.os_version},
                      {"arch", wire::to_string(image.arch)}});
  }
  return images;
}

ordered_json flavors_json(const AgentConfig& config) {
  ordered_json flavors = ordered_json::array();
  for (const auto& flavor : config.flavors) {
    flavors.push_back({{"name", flavor.name},
                       {"vcpus", flavor.vcpus},
                       {"memory_mib", flavor.memory_mib},
                       {"disk_gib", flavor.disk_gib}});
  }
  return flavors;
}

}  // namespace

void ApiMetrics::record(const std::string& route, const std::string& method, int status,
                        std::chrono::steady_clock::duration elapsed) {
  std::lock_guard lock(mutex_);
  ++requests_[{route, method, status}];
  auto& [sum, count] = latency_[route];
  sum += std::chrono::duration<double>(elapsed).count();
  ++count;
}

void ApiMetrics::record_error(std::string_view code) {
  std::lock_guard lock(mutex_);
  ++errors_[std::string(code)];
}

std::string ApiMetrics::render(const std::map<std::string, std::size_t>& instances_by_state) const {
  std::lock_guard lock(mutex_);
  std::ostringstream out;
  out << "# HELP garm_edge_requests_total Control API requests by route, method and status.\n"
         "# TYPE garm_edge_requests_total counter\n";
  for (const auto& [key, count] : requests_) {
    const auto& [route, method, status] = key;
    out << "garm_edge_requests_total{route=\"" << route << "\",method=\"" << method << "\",code=\""
        << status << "\"} " << count << "\n";
  }
  out << "# HELP garm_edge_request_duration_seconds Time to answer control API requests.\n"
         "# TYPE garm_edge_request_duration_seconds summary\n";
  for (const auto& [route, totals] : latency_) {
    out << "garm_edge_request_duration_seconds_sum{route=\"" << route << "\"} " << totals.first
        << "\n"
        << "garm_edge_request_duration_seconds_count{route=\"" << route << "\"} " << totals.second
        << "\n";
  }
  out << "# HELP garm_edge_command_errors_total Failed commands by error code (unavailable and "
         "timeout mean "
         "libvirt trouble).\n# TYPE garm_edge_command_errors_total counter\n";
  for (const auto& [code, count] : errors_) {
    out << "garm_edge_command_errors_total{code=\"" << code << "\"} " << count << "\n";
  }
  out << "# HELP garm_edge_instances Instances on this host by state.\n# TYPE garm_edge_instances "
         "gauge\n";
  for (const auto& [state, count] : instances_by_state) {
    out << "garm_edge_instances{state=\"" << state << "\"} " << count << "\n";
  }
  return out.str();
}

ControlApi::ControlApi(const AgentConfig& config, InstanceService& service,
                       hypervisor::Hypervisor& hypervisor)
    : config_(config), service_(service), hypervisor_(hypervisor) {}

net::HttpResponse ControlApi::handle(const net::HttpRequest& request,
                                     const net::PeerIdentity& peer) {
  const auto started = std::chrono::steady_clock::now();
  std::string route_name = "unknown";
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
  metrics_.record(route_name, known_method ? request.method : "other", response.status,
                  std::chrono::steady_clock::now() - started);
  return response;
}

net::HttpResponse ControlApi::answer(const net::HttpRequest& request, const net::PeerIdentity& peer,
                                     std::string& route_name) {
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

net::HttpResponse ControlApi::route(const net::HttpRequest& request, const net::PeerIdentity& peer,
                                    std::string& route_name) {
  const auto parts = split_path(request.path);
  if (!parts) {
    return error_response(400, "invalid_argument",
                          "the path holds a malformed percent-encoding, invalid UTF-8 or a "
                          "control character");
  }
  const auto& p = *parts;
  const auto& method = request.method;
  if (p.size() == 1 && p[0] == "healthz" && method == "GET") {
    route_name = "healthz";
    if (const auto libvirt = hypervisor_.health(); !libvirt.reachable) {
      return json_response(503,
                           {{"status", "unavailable"},
                            {"libvirt", "unreachable: " + printable_excerpt(libvirt.detail, 512)}});
    }
    return json_response(200, {{"status", "ok"}});
  }
  if (p.size() == 1 && p[0] == "metrics" && method == "GET") {
    route_name = "metrics";
    return metrics();
  }
  if (p.empty() || p[0] != "v1") {
    return error_response(404, "not_found", "no such endpoint");
  }
  std::vector<std::string> identities = peer.uri_names;
  identities.push_back(peer.common_name);
  if (!config_.api.knows(identities)) {
    route_name = "forbidden";
    return error_response(
        403, "forbidden",
        "client \"" + printable_excerpt(peer.common_name) + "\" is not in [[api.clients]]");
  }
  if (p.size() == 2 && method == "GET" && p[1] == "images") {
    route_name = "images";
    return json_response(200, images_json(config_));
  }
  if (p.size() == 2 && method == "GET" && p[1] == "flavors") {
    route_name = "flavors";
    return json_response(200, flavors_json(config_));
  }
  if (p.size() == 2 && method == "GET" && p[1] == "capacity") {
    route_name = "capacity";
    const auto capacity = hypervisor_.capacity();
    return json_response(200, {{"agent_id", config_.agent_id},
                               {"cpus", capacity.cpus},
                               {"memory_mib", capacity.memory_mib},
                               {"images", images_json(config_)},
                               {"flavors", flavors_json(config_)}});
  }
  if (p.size() == 3 && method == "GET" && p[1] == "schemas" && p[2] == "extra-specs") {
    route_name = "schemas";
    return HttpResponse{.status = 200,
                        .content_type = "application/schema+json",
                        .body = wire::extra_specs_json_schema(),
                        .headers = {}};
  }
  if (p.size() == 3 && method == "GET" && p[1] == "schemas" && p[2] == "config") {
    route_name = "schemas";
    return HttpResponse{.status = 200,
                        .content_type = "application/schema+json",
                        .body = agent_config_json_schema(),
                        .headers = {}};
  }
  if (p.size() >= 3 && p[1] == "controllers") {
    const auto& controller = p[2];
    wire::validate_uuid(controller, "controller ID in the path");
    if (!config_.api.allows(identities, controller)) {
      route_name = "forbidden";
      return error_response(403, "forbidden",
                            "client \"" + printable_excerpt(peer.common_name) +
                                "\" may not act for controller " + controller);
    }
    return controller_route(request, p, route_name);
  }
  return error_response(404, "not_found", "no such endpoint");
}

net::HttpResponse ControlApi::controller_route(const net::HttpRequest& request,
                                               const std::vector<std::string>& p,
                                               std::string& route_name) {
  const auto& controller = p[2];
  const auto& method = request.method;
  const bool instances = p.size() >= 4 && p[3] == "instances";
  if (instances && p.size() == 4 && method == "POST") {
    const auto bootstrap = wire::parse_bootstrap_instance(request.body);
    if (query_flag(request, "dry_run")) {
      route_name = "dry_run";
      const auto dry = service_.dry_run_create(controller, bootstrap);
      return json_response(200, {{"already_exists", dry.already_exists},
                                 {"domain_name", dry.domain_name},
                                 {"domain_xml", dry.domain_xml},
                                 {"volume_xml", dry.volume_xml},
                                 {"user_data", dry.user_data},
                                 {"instance", wire::to_json(dry.instance)}});
    }
    route_name = "create";
    return json_response(200, wire::to_json(service_.create(controller, bootstrap)));
  }
  if (instances && p.size() == 4 && method == "DELETE") {
    route_name = "remove_all";
    return json_response(200, {{"removed", service_.remove_all(controller)}});
  }
  if (instances && p.size() == 5 && method == "GET") {
    route_name = "get";
    const auto instance = service_.get(controller, p[4]);
    if (!instance) {
      return error_response(404, "not_found", "no instance " + printable_excerpt(p[4]));
    }
    return json_response(200, wire::to_json(*instance));
  }
  if (instances && p.size() == 6 && method == "GET" && p[5] == "guest") {
    route_name = "guest";
    const auto guest = service_.guest_status(controller, p[4]);
    if (!guest) {
      return error_response(404, "not_found",
                            "no instance " + printable_excerpt(p[4]) + " with guest access");
    }
    return json_response(200, guest_json(*guest));
  }
  if (p.size() == 4 && p[3] == "events" && method == "GET") {
    route_name = "events";
    auto events = ordered_json::array();
    for (const auto& event :
         service_.events().recent(controller, query_value(request, "instance").value_or(""))) {
      events.push_back({{"time", event.time},
                        {"event", event.event},
                        {"instance", event.instance},
                        {"detail", event.detail}});
    }
    return json_response(200, events);
  }
  if (instances && p.size() == 5 && method == "DELETE") {
    route_name = "delete";
    return json_response(200, {{"deleted", service_.remove(controller, p[4])}});
  }
  if (instances && p.size() == 6 && method == "POST" && (p[5] == "start" || p[5] == "stop")) {
    route_name = p[5];
    if (p[5] == "start") {
      service_.start(controller, p[4]);
    } else {
      service_.stop(controller, p[4], query_flag(request, "force"));
    }
    return json_response(200, {{"ok", true}});
  }
  if (p.size() == 5 && p[3] == "pools" && p[4] == "validate" && method == "POST") {
    route_name = "validate_pool";
    const auto pool = wire::parse_json_text(request.body, "pool");
    const wire::ObjectReader in(pool, "");
    const auto* extra_specs = in.find("extra_specs");
    service_.validate_pool(in.required_string("image"), in.required_string("flavor"),
                           in.enum_value<wire::OsType>("os_type"),
                           in.enum_value<wire::OsArch>("arch"),
                           extra_specs != nullptr && !extra_specs->is_null()
                               ? std::optional<nlohmann::json>(*extra_specs)
                               : std::nullopt);
    return json_response(200, {{"valid", true}});
  }
  if (p.size() == 6 && p[3] == "pools" && p[5] == "instances" && method == "GET") {
    route_name = "list";
    return json_response(200, wire::to_json(service_.list(controller, p[4])));
  }
  return error_response(404, "not_found", "no such endpoint");
}

std::string ControlApi::metrics_text() {
  auto text = metrics_.render(service_.count_by_state());
  for (const auto& source : metrics_sources_) {
    text += source();
  }
  return text;
}

net::HttpResponse ControlApi::metrics() {
  return HttpResponse{.status = 200,
                      .content_type = "text/plain; version=0.0.4",
                      .body = metrics_text(),
                      .headers = {}};
}

}  // namespace garm_edge::agent
