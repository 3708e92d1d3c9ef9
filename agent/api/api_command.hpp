#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "agent/instances/instance_ids.hpp"
#include "net/http_request.hpp"
#include "wire/bootstrap.hpp"

namespace garm_edge::agent {

// One type per request the control API answers, each carrying only parsed values. `kRoute` is
// its label in /metrics.
struct Health {
  static constexpr std::string_view kRoute = "healthz";
};
struct ShowMetrics {
  static constexpr std::string_view kRoute = "metrics";
};
struct ListImages {
  static constexpr std::string_view kRoute = "images";
};
struct ListFlavors {
  static constexpr std::string_view kRoute = "flavors";
};
struct ShowCapacity {
  static constexpr std::string_view kRoute = "capacity";
};
/// What a hub keeps to answer placement probes itself: every controller's view of the host
/// and its instances' names, so only a client allowed for every controller ("*") may read it.
struct ShowPlacementView {
  static constexpr std::string_view kRoute = "placement_view";
};
/// The agent's warm guests not yet bound to garm's instances.
struct ListWarm {
  static constexpr std::string_view kRoute = "warm";
};
/// The operator's switch: a draining agent takes no new creates. Acts on the whole host, so
/// only a client allowed for every controller ("*") may use it.
struct SetDraining {
  static constexpr std::string_view kRoute = "draining";
  bool draining = true;
};
/// The operator's: pull an image now, ahead of demand (docs/images.md). Only a client allowed
/// for every controller ("*") may, since the disk and the link are the whole host's.
struct PullImage {
  static constexpr std::string_view kRoute = "pull_image";
  std::string image;
};
/// Refresh a cache now (docs/caches.md), in the background: a client allowed for the cache's
/// controller may.
struct RefreshCache {
  static constexpr std::string_view kRoute = "refresh_cache";
  std::string cache;
};
struct ExtraSpecsSchema {
  static constexpr std::string_view kRoute = "schemas";
};
struct ConfigSchema {
  static constexpr std::string_view kRoute = "schemas";
};
struct CreateInstance {
  static constexpr std::string_view kRoute = "create";
  ControllerId controller;
  wire::BootstrapInstance bootstrap;
  bool warm_only = false;  // ?warm_only=true: only by binding a ready warm guest
};
struct DryRunCreate {
  static constexpr std::string_view kRoute = "dry_run";
  ControllerId controller;
  wire::BootstrapInstance bootstrap;
};
struct GetInstance {
  static constexpr std::string_view kRoute = "get";
  ControllerId controller;
  InstanceRef instance;
};
/// Placement's one question to an agent: does it hold this instance, and what can it take?
struct ShowPlacement {
  static constexpr std::string_view kRoute = "placement";
  ControllerId controller;
  InstanceRef instance;
};
struct GetGuest {
  static constexpr std::string_view kRoute = "guest";
  ControllerId controller;
  InstanceRef instance;
};
struct ListInstances {
  static constexpr std::string_view kRoute = "list";
  ControllerId controller;
  PoolId pool;
};
struct ListEvents {
  static constexpr std::string_view kRoute = "events";
  ControllerId controller;
  std::string instance;  // empty: every instance's
};
struct DeleteInstance {
  static constexpr std::string_view kRoute = "delete";
  ControllerId controller;
  InstanceRef instance;
};
struct DeleteAllInstances {
  static constexpr std::string_view kRoute = "remove_all";
  ControllerId controller;
};
struct StartInstance {
  static constexpr std::string_view kRoute = "start";
  ControllerId controller;
  InstanceRef instance;
};
struct StopInstance {
  static constexpr std::string_view kRoute = "stop";
  ControllerId controller;
  InstanceRef instance;
  bool force = false;
};
struct ValidatePool {
  static constexpr std::string_view kRoute = "validate_pool";
  ControllerId controller;
  PoolSpec pool;
};

using ApiCommand =
    std::variant<Health, ShowMetrics, ListImages, ListFlavors, ShowCapacity, ShowPlacementView,
                 ListWarm, SetDraining, PullImage, RefreshCache, ExtraSpecsSchema, ConfigSchema,
                 CreateInstance, DryRunCreate, GetInstance, ShowPlacement, GetGuest, ListInstances,
                 ListEvents, DeleteInstance, DeleteAllInstances, StartInstance, StopInstance,
                 ValidatePool>;

/// The route name of a command, for /metrics.
std::string_view route_of(const ApiCommand& command);

/// What a route's `{…}` path segments hold once its controller, if any, is parsed.
struct RouteArgs {
  std::optional<ControllerId> controller;
  std::vector<std::string> text;  // the other `{…}` segments, in order
};

/// One endpoint of the control API: method, path pattern and the parser of its command.
struct Route {
  std::string_view method;
  std::string_view pattern;  // e.g. "/v1/controllers/{controller}/instances/{instance}"
  /// Its label in /metrics, also for requests refused while their arguments are parsed.
  std::string_view name;
  /// Throws wire::WireError for an argument, query or body that is not valid.
  ApiCommand (*parse)(const RouteArgs& args, const net::HttpRequest& request);

  bool has_controller() const { return pattern.find("{controller}") != std::string_view::npos; }
};

/// A route and its `{…}` segments as the path spells them (the controller's first).
struct RouteMatch {
  const Route* route;
  std::vector<std::string> segments;
};

/// The path's segments, percent-decoded; nothing when one is malformed, holds a NUL or a
/// control character, or is not valid UTF-8.
std::optional<std::vector<std::string>> split_path(std::string_view path);

/// The route `method` on `parts` names; nothing when no route does.
std::optional<RouteMatch> match_route(std::string_view method,
                                      const std::vector<std::string>& parts);

}  // namespace garm_edge::agent
