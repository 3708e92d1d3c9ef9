#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "wire/enums.hpp"
#include "wire/provider_instance.hpp"

namespace garm_edge::wire {

/// vCPUs, memory and instances: a host's limit, what is used of it, or what is free.
struct ResourceAmount {
  std::uint64_t vcpus = 0;
  std::uint64_t memory_mib = 0;
  std::uint64_t instances = 0;  // in a limit: 0 means none
  std::uint64_t disk_gib = 0;   // guests' disks at full size; in a limit: 0 means not counted

  ResourceAmount& operator+=(const ResourceAmount& other) {
    vcpus += other.vcpus;
    memory_mib += other.memory_mib;
    instances += other.instances;
    disk_gib += other.disk_gib;
    return *this;
  }
  bool operator==(const ResourceAmount&) const = default;
};

struct ImageOffer {
  std::string name;
  std::optional<OsType> os_type;
  std::string os_name;
  std::string os_version;
  std::optional<OsArch> arch;
  /// "ready": a create may use it now; "pulling" or "failed": the agent pulls it and has no
  /// base yet. Agents before image pulls send none: ready.
  std::string state = "ready";
  std::uint64_t pulled_bytes = 0;  // of the pull under way, also while an older base serves
  std::uint64_t total_bytes = 0;   // 0: not known
  std::string error;               // why the last pull failed

  bool ready() const { return state == "ready"; }
};

struct FlavorOffer {
  std::string name;
  std::uint64_t vcpus = 0;
  std::uint64_t memory_mib = 0;
  std::uint64_t disk_gib = 0;
};

/// Warm guests of one `[[warm]]` entry (docs/warm-guests.md): a ready one takes a create of
/// its controller, image and flavor at once, without any further capacity.
struct WarmOffer {
  std::string controller;  // the only controller whose creates may take them
  std::string image;
  std::string flavor;
  std::uint64_t ready = 0;
  std::uint64_t warming = 0;
};

/// A job cache of the agent (docs/caches.md), shown to its controller's clients only.
struct CacheOffer {
  std::string name;
  std::string controller;
  std::uint64_t generation = 0;  // 0: none yet: its guests start without it
  std::string made_at;           // of the current generation
  bool refreshing = false;
  std::string error;  // why the last refresh failed (the last generation stays)
};

/// The guest addresses of an agent with `[guests]`: every instance holds one, and one given
/// back rests before another guest gets it.
struct AddressAmount {
  std::uint64_t total = 0;
  std::uint64_t held = 0;
  std::uint64_t resting = 0;
  std::uint64_t free = 0;

  bool operator==(const AddressAmount&) const = default;
};

/// A storage pool of the agent that pools may put scratch disks on, by the name they use.
struct ScratchPoolOffer {
  std::string name;
  std::uint64_t max_disk_gib = 0;

  bool operator==(const ScratchPoolOffer&) const = default;
};

/// What a pool may ask of the agent beyond its flavor (docs/extra-specs.md).
struct ShapeOffer {
  /// How guests of each OS arch (amd64, arm64, arm) are run: kvm, qemu (emulated) or test.
  std::map<std::string, std::string> virt_types;
  /// Allowed by the operator and offered by the host's KVM.
  bool nested_virtualization = false;
  std::uint64_t max_root_disk_gib = 0;  // 0: none larger than the flavor's
  std::vector<ScratchPoolOffer> scratch_pools;
  std::vector<std::string> networks;

  bool operator==(const ShapeOffer&) const = default;
};

/// One controller's share of a host (docs/shares.md): what its instances and warm guests take,
/// the operator's quota and reservation for it, and what a create of it may still take here at
/// each priority.
struct ControllerShare {
  std::string controller;
  ResourceAmount used;
  ResourceAmount quota;     // a field 0: no quota on it
  ResourceAmount reserved;  // kept for it: other controllers' creates leave what it does not use
  Priority max_priority = Priority::high;  // its pools' priority is capped there
  /// By priority: the room of the host that neither other controllers' unused reservations
  /// nor the operator's headroom for higher priorities hold, within its quota. Instances and
  /// disk are 0 when unbounded (neither the host nor the quota limits them).
  std::map<Priority, ResourceAmount> room;
  bool instances_bounded = false;
  bool disk_bounded = false;

  /// The room at `priority` (capped at max_priority).
  const ResourceAmount& room_at(Priority priority) const;
  bool operator==(const ControllerShare&) const = default;
};

/// The additions to the agent API since its baseline that this build's agent offers. A provider
/// uses an addition only with agents that list it; an agent that lists nothing is older than
/// the list and offers the baseline (which includes binding warm guests: "warm-bind").
inline const std::vector<std::string> kAgentFeatures = {
    "warm-bind", "hub-tunnel",  "capacity-features", "image-pull",
    "caches",    "pool-shapes", "placement-view",    "shares"};

/// What an agent tells placement and the fleet view in one answer (`GET /v1/capacity`).
struct AgentCapacity {
  std::string agent_id;
  std::string version;
  std::string machine;  // the host's CPU architecture as libvirt names it (x86_64, aarch64)
  std::uint64_t cpus = 0;
  std::uint64_t memory_mib = 0;
  ResourceAmount limit;
  ResourceAmount used;  // every instance the agent holds, and the creates under way
  ResourceAmount free;  // instances: never more than addresses->free
  /// Nothing when the agent gives guests no address (no `[guests]`, or an older agent).
  std::optional<AddressAmount> addresses;
  bool draining = false;
  std::map<std::string, std::uint64_t> instances_by_state;  // running, shutoff, ...
  std::vector<ImageOffer> images;
  std::vector<FlavorOffer> flavors;
  std::vector<WarmOffer> warm;
  std::vector<CacheOffer> caches;
  ShapeOffer shapes;
  /// In a placement answer: the share of the controller it was asked for, unnamed (also one
  /// without a quota: other controllers' reservations and the priority headroom shrink its
  /// room).
  std::optional<ControllerShare> share;
  /// Every share the client may see: its own controllers' with a quota, reservation or use.
  std::vector<ControllerShare> shares;
  /// What the agent offers beyond the API's baseline (docs/fleet.md, version skew); empty
  /// from an agent older than the list.
  std::vector<std::string> features;

  const ImageOffer* find_image(std::string_view name) const;
  const FlavorOffer* find_flavor(std::string_view name) const;
  /// Warm guests of that image and flavor that are ready now (0 when there are none).
  std::uint64_t warm_ready(std::string_view image, std::string_view flavor) const;
  /// Does the agent offer `feature`? An agent older than the features list offers only
  /// `baseline` ones.
  bool offers(std::string_view feature, bool baseline) const;
};

/// What placement asks each agent before a create
/// (`GET /v1/controllers/{c}/placement/{instance}`): the instance of that name if the agent
/// has it (garm retries creates), and its capacity.
struct PlacementAnswer {
  std::optional<ProviderInstance> instance;
  /// A create of that name is under way there (garm retried one that has not returned yet).
  bool create_under_way = false;
  AgentCapacity capacity;
};

nlohmann::ordered_json to_json(const std::vector<ImageOffer>& images);
nlohmann::ordered_json to_json(const std::vector<FlavorOffer>& flavors);
nlohmann::ordered_json to_json(const AgentCapacity& capacity);
nlohmann::ordered_json to_json(const PlacementAnswer& answer);
/// Throws WireError naming the field that is wrong.
AgentCapacity parse_agent_capacity(std::string_view json_text);
AgentCapacity agent_capacity_from_json(const nlohmann::json& document, const std::string& path);
PlacementAnswer parse_placement_answer(std::string_view json_text);

}  // namespace garm_edge::wire
