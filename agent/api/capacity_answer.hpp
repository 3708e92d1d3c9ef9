#pragma once

#include "agent/api/control_api.hpp"
#include "wire/agent_capacity.hpp"
#include "wire/placement_view.hpp"

namespace garm_edge::agent {

/// The configured images; those the agent pulls with where their pull stands.
std::vector<wire::ImageOffer> image_offers(const AgentConfig& config, const ImageBases* pulled);
std::vector<wire::FlavorOffer> flavor_offers(const AgentConfig& config);

/// `GET /v1/capacity` and placement's capacity: the host's, and of what belongs to one
/// controller (warm guests, caches, scratch pools and networks kept for some) only what
/// `shown` lets through: the asking controller's for a placement, those a client may act for
/// otherwise (other controllers' IDs and resources are not a tenant's to see). The shares of
/// the controllers `shown` lets through, and `asking`'s as `share` (a placement's).
wire::AgentCapacity capacity_answer(const AgentConfig& config, const CapacityReport& report,
                                    const ImageBases* images, const CacheGenerations* caches,
                                    const ControllerFilter& shown,
                                    const std::optional<std::string>& asking = std::nullopt);

/// `GET /v1/placement-view`, for a hub to answer placement probes itself: capacity_answer
/// for each controller with something of its own here and for every other one, and the
/// instances held or being created.
wire::PlacementView placement_view(const AgentConfig& config, const CapacityReport& report,
                                   const ImageBases* images, const CacheGenerations* caches);

}  // namespace garm_edge::agent
