#include "provider/placement.hpp"

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <string_view>

#include "common/text.hpp"
#include "wire/error.hpp"

namespace garm_edge::provider {
namespace {

std::string resources_text(std::uint64_t vcpus, std::uint64_t memory_mib) {
  return std::to_string(vcpus) + " vCPUs, " + std::to_string(memory_mib) + " MiB";
}

/// Why `capacity` cannot take `request`; nothing when it can. `need_room`: a cold create needs
/// the flavor's resources and a guest address free, a ready warm guest holds them already.
/// "is being pulled (37%)", "failed to pull: …".
std::string pull_text(const wire::ImageOffer& image) {
  if (image.state == "failed") {
    return "failed to pull: " + printable_excerpt(image.error, 200);
  }
  if (image.total_bytes == 0) {
    return "is being pulled (" + std::to_string(image.pulled_bytes >> 20U) + " MiB so far)";
  }
  return "is being pulled (" +
         std::to_string(image.pulled_bytes * 100 / std::max<std::uint64_t>(image.total_bytes, 1)) +
         "%)";
}

std::string os_arch_of(const wire::ImageOffer& image) {
  return std::string(wire::to_string(image.arch.value_or(wire::OsArch::amd64)));
}

/// Does the agent run guests of the image's architecture with KVM (the test driver counts)?
bool runs_on_kvm(const wire::AgentCapacity& capacity, const wire::ImageOffer& image) {
  const auto type = capacity.shapes.virt_types.find(os_arch_of(image));
  return type != capacity.shapes.virt_types.end() &&
         (type->second == "kvm" || type->second == "test");
}

std::uint64_t root_disk_gib(const wire::PoolShape& shape, const wire::FlavorOffer& flavor) {
  return std::max(shape.root_disk_gib.value_or(0), flavor.disk_gib);
}

/// Why the agent cannot give the pool its shape (docs/extra-specs.md); nothing when it can.
std::optional<std::string> unfit_shape(const wire::PoolShape& shape,
                                       const wire::AgentCapacity& capacity,
                                       const wire::ImageOffer& image,
                                       const wire::FlavorOffer& flavor) {
  if (shape.is_default()) {
    return std::nullopt;
  }
  const auto& offer = capacity.shapes;
  if (!capacity.offers("pool-shapes", false)) {
    return "agent version " + printable_excerpt(capacity.version, 40) +
           " knows no pool shapes (root_disk_gib, scratch_disks, networks, ...)";
  }
  if (root_disk_gib(shape, flavor) > std::max(flavor.disk_gib, offer.max_root_disk_gib)) {
    return "root disk of " + std::to_string(*shape.root_disk_gib) + " GiB is more than it allows";
  }
  for (const auto& disk : shape.scratch_disks) {
    const auto pool = std::find_if(offer.scratch_pools.begin(), offer.scratch_pools.end(),
                                   [&](const auto& p) { return p.name == disk.pool; });
    if (pool == offer.scratch_pools.end()) {
      return "no scratch pool \"" + disk.pool + "\"";
    }
    if (disk.size_gib > pool->max_disk_gib) {
      return "scratch pool " + disk.pool + " takes disks of at most " +
             std::to_string(pool->max_disk_gib) + " GiB";
    }
  }
  for (const auto& network : shape.networks) {
    if (std::find(offer.networks.begin(), offer.networks.end(), network) == offer.networks.end()) {
      return "no network \"" + network + "\"";
    }
  }
  if (shape.virt_type == wire::VirtTypeRequest::kvm && !runs_on_kvm(capacity, image)) {
    return "no KVM for " + os_arch_of(image) + " guests";
  }
  if (shape.nested_virtualization &&
      (!offer.nested_virtualization || !runs_on_kvm(capacity, image))) {
    return "no nested virtualization";
  }
  return std::nullopt;
}

std::uint64_t disk_gib_wanted(const wire::PoolShape& shape, const wire::FlavorOffer& flavor) {
  auto total = root_disk_gib(shape, flavor);
  for (const auto& disk : shape.scratch_disks) {
    total += disk.size_gib;
  }
  return total;
}

/// What the agent's share for this controller leaves a create of the pool's priority: its
/// quota there, other controllers' reservations and the headroom kept for higher priorities.
const wire::ResourceAmount* share_room(const PlacementRequest& request,
                                       const wire::AgentCapacity& capacity) {
  if (!capacity.share) {
    return nullptr;  // an agent older than shares: its free room is all there is
  }
  return &capacity.share->room_at(request.priority.value_or(wire::Priority::normal));
}

std::optional<std::string> no_share_room(const PlacementRequest& request,
                                         const wire::AgentCapacity& capacity,
                                         const wire::FlavorOffer& flavor) {
  const auto* room = share_room(request, capacity);
  if (room == nullptr) {
    return std::nullopt;
  }
  const auto& share = *capacity.share;
  const bool slot = !share.instances_bounded || room->instances >= 1;
  const bool disk = !share.disk_bounded || disk_gib_wanted(request.shape, flavor) <= room->disk_gib;
  if (flavor.vcpus <= room->vcpus && flavor.memory_mib <= room->memory_mib && slot && disk) {
    return std::nullopt;
  }
  const auto priority =
      std::min(request.priority.value_or(wire::Priority::normal), share.max_priority);
  return "no room for this controller at priority " + std::string(wire::to_string(priority)) +
         ": " + resources_text(room->vcpus, room->memory_mib) +
         (share.instances_bounded ? ", " + std::to_string(room->instances) + " instances" : "") +
         " left of its quota, other controllers' reservations and the headroom kept for "
         "higher priorities";
}

std::optional<std::string> unfit_reason(const PlacementRequest& request, const AgentEndpoint& agent,
                                        const wire::AgentCapacity& capacity, bool need_room) {
  if (capacity.draining) {
    return "draining";
  }
  for (const auto& label : request.labels) {
    if (std::find(agent.labels.begin(), agent.labels.end(), label) == agent.labels.end()) {
      return "no label \"" + printable_excerpt(label) + "\"";
    }
  }
  const auto* image = capacity.find_image(request.image);
  if (image == nullptr) {
    return "no image \"" + printable_excerpt(request.image) + "\"";
  }
  if (request.arch && image->arch != request.arch) {
    return "image \"" + printable_excerpt(image->name) + "\" is " +
           std::string(image->arch ? wire::to_string(*image->arch) : "of no arch") + ", not " +
           std::string(wire::to_string(*request.arch));
  }
  if (request.os_type && image->os_type != request.os_type) {
    return "image \"" + printable_excerpt(image->name) + "\" is not " +
           std::string(wire::to_string(*request.os_type));
  }
  const auto* flavor = capacity.find_flavor(request.flavor);
  if (flavor == nullptr) {
    return "no flavor \"" + printable_excerpt(request.flavor) + "\"";
  }
  if (auto reason = unfit_shape(request.shape, capacity, *image, *flavor)) {
    return reason;
  }
  if (!need_room) {
    return std::nullopt;  // a warm guest has booted from its base already
  }
  if (!image->ready()) {
    return "image \"" + printable_excerpt(image->name) + "\" " + pull_text(*image);
  }
  if (capacity.addresses && capacity.addresses->free == 0) {
    return "no free guest address: " + std::to_string(capacity.addresses->held) + " held, " +
           std::to_string(capacity.addresses->resting) + " resting after a delete, of " +
           std::to_string(capacity.addresses->total);
  }
  const auto& free = capacity.free;
  const bool instance_slot = capacity.limit.instances == 0 || free.instances >= 1;
  if (flavor->vcpus > free.vcpus || flavor->memory_mib > free.memory_mib || !instance_slot) {
    return "no capacity: flavor " + printable_excerpt(flavor->name) + " needs " +
           resources_text(flavor->vcpus, flavor->memory_mib) + ", free " +
           resources_text(free.vcpus, free.memory_mib) +
           (instance_slot
                ? std::string()
                : ", no instance slot left of " + std::to_string(capacity.limit.instances));
  }
  if (const auto disk = disk_gib_wanted(request.shape, *flavor);
      capacity.limit.disk_gib != 0 && disk > free.disk_gib) {
    return "no capacity: disks of " + std::to_string(disk) + " GiB, free " +
           std::to_string(free.disk_gib) + " GiB";
  }
  // The host has room: whether it is this controller's to take (docs/shares.md).
  return no_share_room(request, capacity, *flavor);
}

/// Agents that emulate the image's architecture after those that run it on KVM: one fleet may
/// mix both, and an emulated runner is many times slower.
void kvm_first(const PlacementRequest& request, const std::vector<PlacementInput>& inputs,
               std::vector<std::size_t>& order) {
  if (request.shape.virt_type == wire::VirtTypeRequest::qemu) {
    return;
  }
  std::stable_partition(order.begin(), order.end(), [&](std::size_t i) {
    const auto* image = inputs[i].capacity->find_image(request.image);
    return image != nullptr && runs_on_kvm(*inputs[i].capacity, *image);
  });
}

/// FNV-1a, the same on every host and every run of one version (a retry makes the same choice),
/// then SplitMix64's finalizer: FNV-1a alone moves only bits 40 to 48 for a change in the last
/// bytes, so garm's names (alike but for their ends) sorted by it chose few of the tied agents.
std::uint64_t stable_hash(std::string_view text) {
  std::uint64_t hash = 14695981039346656037ULL;
  for (const char c : text) {
    hash = (hash ^ static_cast<unsigned char>(c)) * 1099511628211ULL;
  }
  hash = (hash ^ (hash >> 30)) * 0xbf58476d1ce4e5b9ULL;
  hash = (hash ^ (hash >> 27)) * 0x94d049bb133111ebULL;
  return hash ^ (hash >> 31);
}

/// Most free memory (times weight/100) first. Agents within one instance's memory of each
/// other count as tied, and a tie goes by a hash of the instance's and the agent's names: a
/// burst of creates that all saw the same free memory spreads over the tied agents instead of
/// piling onto the first, and a retry of one name makes the same choice.
void order_for_spread(const PlacementRequest& request, const std::vector<PlacementInput>& inputs,
                      std::vector<std::size_t>& order) {
  const auto score = [&](std::size_t i) {
    // The share's room is never more than the host's free room.
    const auto* room = share_room(request, *inputs[i].capacity);
    const auto free = room != nullptr ? room->memory_mib : inputs[i].capacity->free.memory_mib;
    return static_cast<double>(free) * inputs[i].agent->weight / 100.0;
  };
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return score(a) > score(b); });
  for (auto group = order.begin(); group != order.end();) {
    const auto* flavor = inputs[*group].capacity->find_flavor(request.flavor);
    const double one_instance = flavor != nullptr ? static_cast<double>(flavor->memory_mib) : 0.0;
    const auto end = std::find_if(std::next(group), order.end(), [&](std::size_t i) {
      return score(*group) - score(i) >= one_instance;
    });
    std::stable_sort(group, end, [&](std::size_t a, std::size_t b) {
      return stable_hash(request.name + "/" + inputs[a].agent->name) >
             stable_hash(request.name + "/" + inputs[b].agent->name);
    });
    group = end;
  }
}

}  // namespace

PlacementRequest placement_request_for(const wire::BootstrapInstance& bootstrap) {
  PlacementRequest request{.name = bootstrap.name,
                           .image = bootstrap.image,
                           .flavor = bootstrap.flavor,
                           .arch = bootstrap.arch,
                           .os_type = bootstrap.os_type,
                           .labels = {},
                           .shape = wire::parse_pool_shape(bootstrap.extra_specs),
                           .priority = wire::parse_priority(bootstrap.extra_specs)};
  if (!bootstrap.extra_specs || !bootstrap.extra_specs->is_object()) {
    return request;
  }
  const auto labels = bootstrap.extra_specs->find("agent_labels");
  if (labels == bootstrap.extra_specs->end() || labels->is_null()) {
    return request;
  }
  if (!labels->is_array()) {
    throw wire::WireError("extra_specs.agent_labels", "expected a list of strings");
  }
  for (const auto& label : *labels) {
    if (!label.is_string()) {
      throw wire::WireError("extra_specs.agent_labels", "expected a list of strings");
    }
    request.labels.push_back(label.get<std::string>());
  }
  return request;
}

PlacementPlan plan_placement(const PlacementRequest& request,
                             const std::vector<PlacementInput>& inputs, Placement policy) {
  PlacementPlan plan;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const auto& input = inputs[i];
    if (!input.capacity) {
      plan.skipped.push_back({input.agent->name, "unreachable: " + input.error});
    } else if (const auto reason = unfit_reason(request, *input.agent, *input.capacity, true)) {
      plan.skipped.push_back({input.agent->name, *reason});
    } else {
      plan.order.push_back(i);
    }
    // Binding a warm guest is offered by every agent that shows warm guests, unless its
    // features say otherwise (version skew: only what an agent offers is used).
    if (input.capacity && input.capacity->offers("warm-bind", true) &&
        input.capacity->warm_ready(request.image, request.flavor) > 0 &&
        !unfit_reason(request, *input.agent, *input.capacity, false)) {
      plan.warm_first.push_back(i);
    }
  }
  // A pool that must start goes where there is most room, not where packing would put it.
  if (request.priority == wire::Priority::high) {
    policy = Placement::spread;
  }
  for (auto* agents : {&plan.warm_first, &plan.order}) {
    if (policy == Placement::pack) {
      std::stable_sort(agents->begin(), agents->end(), [&](std::size_t a, std::size_t b) {
        return inputs[a].agent->weight > inputs[b].agent->weight;
      });
    } else {
      order_for_spread(request, inputs, *agents);
    }
    kvm_first(request, inputs, *agents);
  }
  return plan;
}

std::optional<std::string> over_fleet_quota(const FleetQuota& quota,
                                            const PlacementRequest& request,
                                            const std::vector<PlacementInput>& inputs) {
  wire::ResourceAmount held;
  const wire::FlavorOffer* flavor = nullptr;
  std::size_t uncounted = 0;
  for (const auto& input : inputs) {
    if (!input.capacity || !input.capacity->share) {
      ++uncounted;
      continue;
    }
    held += input.capacity->share->used;
    if (flavor == nullptr) {
      flavor = input.capacity->find_flavor(request.flavor);
    }
  }
  const wire::FlavorOffer none{};
  const auto& wanted = flavor != nullptr ? *flavor : none;
  std::string over;
  const auto check = [&](const char* key, std::uint64_t max, std::uint64_t has, std::uint64_t add) {
    if (max != 0 && has + add > max) {
      over += std::string(over.empty() ? "" : ", ") + key + " " + std::to_string(max) + " (holds " +
              std::to_string(has) + ")";
    }
  };
  check("max_instances", quota.max_instances, held.instances, 1);
  check("max_vcpus", quota.max_vcpus, held.vcpus, wanted.vcpus);
  check("max_memory_mib", quota.max_memory_mib, held.memory_mib, wanted.memory_mib);
  check("max_disk_gib", quota.max_disk_gib, held.disk_gib, disk_gib_wanted(request.shape, wanted));
  if (over.empty()) {
    return std::nullopt;
  }
  return "controller " + quota.controller +
         " is at its fleet quota ([[quotas]] of the provider): " + over +
         (uncounted > 0 ? "; " + std::to_string(uncounted) +
                              " agents that did not tell "
                              "their share are not counted"
                        : std::string());
}

std::string describe_skipped(const std::vector<SkippedAgent>& skipped) {
  std::string text;
  for (const auto& agent : skipped) {
    text += "\n  " + agent.agent + ": " + agent.reason;
  }
  return text;
}

}  // namespace garm_edge::provider
