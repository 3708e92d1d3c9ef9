#pragma once

#include <string>
#include <string_view>

#include "agent/base/config.hpp"

namespace garm_edge::agent {

/// The controller ID warm guests carry until they are bound: garm's ListInstances never shows
/// them, and no garm controller has this ID.
inline constexpr std::string_view kWarmControllerId = "6761726d-6564-6765-7761-726d00000000";

/// What shapes a warm guest of `warm`: its controller and its image's and flavor's settings. A
/// warm guest made under another spec is retired rather than handed to garm.
std::string warm_spec_of(const AgentConfig& config, const WarmConfig& warm);

/// The pool ID warm guests of `spec` carry: a UUID made from it.
std::string warm_pool_id(std::string_view spec);

}  // namespace garm_edge::agent
