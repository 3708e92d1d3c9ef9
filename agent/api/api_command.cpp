#include "agent/api/api_command.hpp"

#include <array>

#include "agent/base/cache_config.hpp"
#include "common/hex.hpp"
#include "common/text.hpp"
#include "wire/error.hpp"
#include "wire/validate.hpp"

namespace garm_edge::agent {
namespace {

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
    const int high = hex_digit_value(segment[i + 1]);
    const int low = hex_digit_value(segment[i + 2]);
    if (high < 0 || low < 0 || (high == 0 && low == 0)) {
      return std::nullopt;
    }
    out += static_cast<char>(high * 16 + low);
    i += 2;
  }
  return out;
}

/// The percent-decoded value of `name` in the query string; nothing when absent. A value that
/// is malformed or not plain text is the client's error, never read as "absent".
std::optional<std::string> query_value(const net::HttpRequest& request, std::string_view name) {
  const auto raw = net::raw_query_value(request, name);
  if (!raw) {
    return std::nullopt;
  }
  auto value = decode_segment(*raw);
  if (!value || !is_plain_text(*value)) {
    throw wire::WireError("query parameter " + std::string(name),
                          "malformed percent-encoding, invalid UTF-8 or a control character");
  }
  return value;
}

bool query_flag(const net::HttpRequest& request, std::string_view name) {
  return query_value(request, name).value_or("") == "true";
}

InstanceRef instance_arg(const RouteArgs& args) {
  return InstanceRef::parse(args.text.at(0));
}

ApiCommand parse_create(const RouteArgs& args, const net::HttpRequest& request) {
  auto bootstrap = wire::parse_bootstrap_instance(request.body);
  if (query_flag(request, "dry_run")) {
    return DryRunCreate{.controller = *args.controller, .bootstrap = std::move(bootstrap)};
  }
  return CreateInstance{.controller = *args.controller,
                        .bootstrap = std::move(bootstrap),
                        .warm_only = query_flag(request, "warm_only")};
}

// Order matters only where two patterns could match one path: none do.
const std::array kRoutes{
    Route{"GET", "/healthz", "healthz",
          [](const RouteArgs&, const net::HttpRequest&) -> ApiCommand { return Health{}; }},
    Route{"GET", "/metrics", "metrics",
          [](const RouteArgs&, const net::HttpRequest&) -> ApiCommand { return ShowMetrics{}; }},
    Route{"GET", "/v1/images", "images",
          [](const RouteArgs&, const net::HttpRequest&) -> ApiCommand { return ListImages{}; }},
    Route{"GET", "/v1/flavors", "flavors",
          [](const RouteArgs&, const net::HttpRequest&) -> ApiCommand { return ListFlavors{}; }},
    Route{"GET", "/v1/capacity", "capacity",
          [](const RouteArgs&, const net::HttpRequest&) -> ApiCommand { return ShowCapacity{}; }},
    Route{"GET", "/v1/placement-view", "placement_view",
          [](const RouteArgs&, const net::HttpRequest&) -> ApiCommand {
            return ShowPlacementView{};
          }},
    Route{"GET", "/v1/warm", "warm",
          [](const RouteArgs&, const net::HttpRequest&) -> ApiCommand { return ListWarm{}; }},
    Route{"POST", "/v1/draining", "draining",
          [](const RouteArgs&, const net::HttpRequest&) -> ApiCommand {
            return SetDraining{.draining = true};
          }},
    Route{"DELETE", "/v1/draining", "draining",
          [](const RouteArgs&, const net::HttpRequest&) -> ApiCommand {
            return SetDraining{.draining = false};
          }},
    Route{"POST", "/v1/images/{image}/pull", "pull_image",
          [](const RouteArgs& args, const net::HttpRequest&) -> ApiCommand {
            wire::validate_resource_name(args.text.at(0), "image");
            return PullImage{.image = args.text.at(0)};
          }},
    Route{"POST", "/v1/caches/{cache}/refresh", "refresh_cache",
          [](const RouteArgs& args, const net::HttpRequest&) -> ApiCommand {
            if (!is_cache_name(args.text.at(0))) {
              throw wire::WireError("cache", "must be a cache's name: 1-24 of a-z, 0-9 and '-'");
            }
            return RefreshCache{.cache = args.text.at(0)};
          }},
    Route{
        "GET", "/v1/schemas/extra-specs", "schemas",
        [](const RouteArgs&, const net::HttpRequest&) -> ApiCommand { return ExtraSpecsSchema{}; }},
    Route{"GET", "/v1/schemas/config", "schemas",
          [](const RouteArgs&, const net::HttpRequest&) -> ApiCommand { return ConfigSchema{}; }},
    Route{"POST", "/v1/controllers/{controller}/instances", "create", parse_create},
    Route{"DELETE", "/v1/controllers/{controller}/instances", "remove_all",
          [](const RouteArgs& args, const net::HttpRequest&) -> ApiCommand {
            return DeleteAllInstances{.controller = *args.controller};
          }},
    Route{"GET", "/v1/controllers/{controller}/instances/{instance}", "get",
          [](const RouteArgs& args, const net::HttpRequest&) -> ApiCommand {
            return GetInstance{.controller = *args.controller, .instance = instance_arg(args)};
          }},
    Route{"DELETE", "/v1/controllers/{controller}/instances/{instance}", "delete",
          [](const RouteArgs& args, const net::HttpRequest&) -> ApiCommand {
            return DeleteInstance{.controller = *args.controller, .instance = instance_arg(args)};
          }},
    Route{"GET", "/v1/controllers/{controller}/placement/{instance}", "placement",
          [](const RouteArgs& args, const net::HttpRequest&) -> ApiCommand {
            return ShowPlacement{.controller = *args.controller, .instance = instance_arg(args)};
          }},
    Route{"GET", "/v1/controllers/{controller}/instances/{instance}/guest", "guest",
          [](const RouteArgs& args, const net::HttpRequest&) -> ApiCommand {
            return GetGuest{.controller = *args.controller, .instance = instance_arg(args)};
          }},
    Route{"POST", "/v1/controllers/{controller}/instances/{instance}/start", "start",
          [](const RouteArgs& args, const net::HttpRequest&) -> ApiCommand {
            return StartInstance{.controller = *args.controller, .instance = instance_arg(args)};
          }},
    Route{"POST", "/v1/controllers/{controller}/instances/{instance}/stop", "stop",
          [](const RouteArgs& args, const net::HttpRequest& request) -> ApiCommand {
            return StopInstance{.controller = *args.controller,
                                .instance = instance_arg(args),
                                .force = query_flag(request, "force")};
          }},
    Route{"GET", "/v1/controllers/{controller}/events", "events",
          [](const RouteArgs& args, const net::HttpRequest& request) -> ApiCommand {
            return ListEvents{.controller = *args.controller,
                              .instance = query_value(request, "instance").value_or("")};
          }},
    Route{"POST", "/v1/controllers/{controller}/pools/validate", "validate_pool",
          [](const RouteArgs& args, const net::HttpRequest& request) -> ApiCommand {
            return ValidatePool{.controller = *args.controller,
                                .pool = PoolSpec::parse(request.body)};
          }},
    Route{"GET", "/v1/controllers/{controller}/pools/{pool}/instances", "list",
          [](const RouteArgs& args, const net::HttpRequest&) -> ApiCommand {
            return ListInstances{.controller = *args.controller,
                                 .pool = PoolId::parse(args.text.at(0))};
          }},
};

/// The `{…}` segments of `parts` when they follow `pattern`; nothing when they do not.
std::optional<std::vector<std::string>> match_pattern(std::string_view pattern,
                                                      const std::vector<std::string>& parts) {
  std::vector<std::string> segments;
  std::size_t i = 0;
  std::string_view rest = pattern.substr(1);  // patterns start with '/'
  for (;; ++i) {
    const auto slash = rest.find('/');
    const auto expected = rest.substr(0, slash);
    if (i >= parts.size()) {
      return std::nullopt;
    }
    if (expected.starts_with('{')) {
      segments.push_back(parts[i]);
    } else if (expected != parts[i]) {
      return std::nullopt;
    }
    if (slash == std::string_view::npos) {
      break;
    }
    rest.remove_prefix(slash + 1);
  }
  if (i + 1 != parts.size()) {
    return std::nullopt;
  }
  return segments;
}

}  // namespace

std::string_view route_of(const ApiCommand& command) {
  return std::visit([](const auto& c) { return std::decay_t<decltype(c)>::kRoute; }, command);
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

std::optional<RouteMatch> match_route(std::string_view method,
                                      const std::vector<std::string>& parts) {
  for (const auto& route : kRoutes) {
    if (route.method != method) {
      continue;
    }
    if (auto segments = match_pattern(route.pattern, parts)) {
      return RouteMatch{.route = &route, .segments = std::move(*segments)};
    }
  }
  return std::nullopt;
}

}  // namespace garm_edge::agent
