#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "provider/provider_config.hpp"
#include "wire/agent_capacity.hpp"
#include "wire/bootstrap.hpp"
#include "wire/pool_shape.hpp"

namespace garm_edge::provider {

/// What an instance needs of the agent that takes it.
struct PlacementRequest {
  std::string name;  // garm's instance name
  std::string image;
  std::string flavor;
  std::optional<wire::OsArch> arch;
  std::optional<wire::OsType> os_type;
  std::vector<std::string> labels;  // the pool's extra spec agent_labels: all are needed
  wire::PoolShape shape;            // root disk, scratch disks, networks, virt type
  /// The pool's extra spec `priority`; an agent caps it for its controller (docs/shares.md).
  std::optional<wire::Priority> priority;
};

/// From garm's bootstrap; throws wire::WireError when agent_labels is not a list of strings or
/// a pool-shape key is wrong.
PlacementRequest placement_request_for(const wire::BootstrapInstance& bootstrap);

/// One agent as placement sees it: its config entry and its capacity answer, or why there is
/// none.
struct PlacementInput {
  const AgentEndpoint* agent = nullptr;
  std::optional<wire::AgentCapacity> capacity;
  std::string error;
};

struct SkippedAgent {
  std::string agent;
  /// unreachable: ..., draining, no image ..., no capacity: ..., no free guest address: ...
  std::string reason;
};

struct PlacementPlan {
  /// Agents with a warm guest of the image and flavor ready, in policy order: asked first, to
  /// bind it and nothing else (a burst that saw one ready guest must not pile cold creates
  /// onto its agent), whether or not they have room for a cold create.
  std::vector<std::size_t> warm_first;
  std::vector<std::size_t> order;  // indexes into the inputs, best first
  std::vector<SkippedAgent> skipped;
};

/// The agents that can take the instance, ordered by `policy`: spread takes the most free
/// memory times weight/100 first (agents within one instance's memory of each other are tied,
/// and ties go by a hash of the instance and agent names), pack the highest weight and then
/// config order; either way agents that run the image's architecture with KVM come before those
/// that emulate it. Where an agent tells the controller's share, its room at the pool's
/// priority is what counts as free, and a high-priority pool goes to the most room whatever the
/// policy. Every other agent is skipped with its reason. Agents that could take it but
/// for room, with a warm guest of the image and flavor ready, are also in `warm_first`.
PlacementPlan plan_placement(const PlacementRequest& request,
                             const std::vector<PlacementInput>& inputs, Placement policy);

/// Why a cold create of the request would take its controller past its fleet-wide quota, from
/// what each agent's share says the controller holds there (instances, warm guests kept for
/// it, creates under way); nothing when it fits. Agents that did not answer are not counted,
/// and the message says how many.
std::optional<std::string> over_fleet_quota(const FleetQuota& quota,
                                            const PlacementRequest& request,
                                            const std::vector<PlacementInput>& inputs);

/// "rack1: no capacity: ..." one line per skipped agent.
std::string describe_skipped(const std::vector<SkippedAgent>& skipped);

}  // namespace garm_edge::provider
