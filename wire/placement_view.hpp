#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "wire/agent_capacity.hpp"

namespace garm_edge::wire {

/// What a hub keeps of one agent to answer placement probes itself
/// (`GET /v1/placement-view`, for a caller that sees every controller): the capacity shown to
/// each controller that has something of its own on the agent (warm guests, caches, scratch
/// pools or networks kept for it), the capacity every other controller is shown, and the
/// instances the agent holds or is creating, by instance_key.
struct PlacementView {
  std::map<std::string, AgentCapacity> by_controller;
  AgentCapacity others;
  std::vector<std::string> instances;
  /// The capacities as the agent wrote them (parse_placement_view fills them): what a hub
  /// passes on keeps the fields a newer agent adds. Empty for a view made here.
  std::map<std::string, std::string> by_controller_text;
  std::string others_text;

  /// What controller `controller` is shown.
  const AgentCapacity& shown_to(const std::string& controller) const;
};

/// "controller/name", the controller in lower case: how a view names an instance.
std::string instance_key(std::string_view controller, std::string_view name);

/// A controller's UUID, a slash and a name of 1 to 255 bytes without a control character.
bool is_instance_key(std::string_view key);

/// What one view may hold: an agent's answer beyond these is refused whole.
constexpr std::size_t kMaxViewControllers = 256;
constexpr std::size_t kMaxViewInstances = 65536;

nlohmann::ordered_json to_json(const PlacementView& view);
/// Throws WireError naming the field that is wrong, or the bound that was passed.
PlacementView parse_placement_view(std::string_view json_text);

}  // namespace garm_edge::wire
