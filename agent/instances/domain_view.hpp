#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "agent/instances/guest_side.hpp"
#include "agent/instances/instance_store.hpp"
#include "hypervisor/hypervisor.hpp"
#include "wire/provider_instance.hpp"

namespace garm_edge::agent {

/// The keys of the tags every domain of ours carries (see hypervisor::Tags): what makes a
/// libvirt domain a garm instance, and all garm needs to describe it without our records.
namespace tag {
inline constexpr const char* kAgent = "agent-id";
inline constexpr const char* kController = "controller-id";
inline constexpr const char* kPool = "pool-id";
inline constexpr const char* kName = "instance-name";
inline constexpr const char* kOsType = "os-type";
inline constexpr const char* kOsName = "os-name";
inline constexpr const char* kOsVersion = "os-version";
inline constexpr const char* kOsArch = "os-arch";
inline constexpr const char* kImage = "image";
inline constexpr const char* kFlavor = "flavor";
inline constexpr const char* kVcpus = "vcpus";           // the flavor's, when created
inline constexpr const char* kMemoryMib = "memory-mib";  // the flavor's, when created
inline constexpr const char* kDiskGib = "disk-gib";      // root and scratch disks, when created
inline constexpr const char* kCreatedAt = "created-at";
inline constexpr const char* kStateId = "state-id";
/// A warm guest's owner (docs/warm-guests.md): the controller whose create alone may bind it.
inline constexpr const char* kWarmController = "warm-controller-id";
/// A warm guest saved to disk (or being saved): shut off, it holds its disk and its memory
/// file, not its vCPUs and memory.
inline constexpr const char* kWarmSaved = "warm-saved";
}  // namespace tag

/// The tags of `record`'s domain, made by agent `agent_id` with state directory `state_id`.
hypervisor::Tags tags_for(const InstanceRecord& record, std::string_view agent_id,
                          std::string_view state_id);

/// Is `domain` agent `agent_id`'s and controller `controller_id`'s?
bool owned_by(const hypervisor::Domain& domain, std::string_view agent_id,
              std::string_view controller_id);

/// garm's view of `domain`: from its tags and power state, with what its guest reported.
wire::ProviderInstance describe(const hypervisor::Domain& domain,
                                const std::optional<GuestView>& guest);

/// A record to tear down a tagged domain that has none; its overlay is in `storage_pool`.
InstanceRecord record_for_orphan(const hypervisor::Domain& domain, const std::string& storage_pool);

}  // namespace garm_edge::agent
