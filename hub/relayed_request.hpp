#pragma once

#include <string>

#include "hub/hub_config.hpp"

namespace garm_edge::hub {

/// The request an agent gets over its tunnel, as `caller` (a [[clients]] entry, or the hub
/// itself): its identity, and the controllers it may act for, so that the agent shows it only
/// their warm guests.
std::string relayed_request(const std::string& method, const std::string& target,
                            const std::string& agent, const std::string& body,
                            const HubClient& caller);

}  // namespace garm_edge::hub
