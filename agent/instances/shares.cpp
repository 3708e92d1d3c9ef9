// How the controllers that share a host share it (docs/shares.md): quotas, reservations and the
// headroom kept free of lower priorities, as one admission rule and the room each controller's
// placement is told of.
#include "agent/instances/shares.hpp"

#include <algorithm>
#include <limits>

#include "common/text.hpp"

namespace garm_edge::agent {
namespace {

/// A field no limit bounds: large enough that no sum of real amounts reaches it.
constexpr std::uint64_t kUnbounded = std::uint64_t{1} << 50;
/// The same for instances, which are counted in std::size_t (32 bits on armhf).
constexpr std::size_t kUnboundedInstances = std::numeric_limits<std::size_t>::max() / 4;

}  // namespace

Resources share_resources(const ShareAmount& amount) {
  return {.vcpus = amount.vcpus,
          .memory_mib = amount.memory_mib,
          .instances = static_cast<std::size_t>(
              std::min<std::uint64_t>(amount.instances, kUnboundedInstances)),
          .disk_gib = amount.disk_gib};
}

namespace {

Resources minus(Resources a, const Resources& b) {
  a -= b;
  return a;
}

Resources plus(Resources a, const Resources& b) {
  a += b;
  return a;
}

/// Each field 0 (no bound) as kUnbounded.
Resources unbounded_where_zero(Resources bound) {
  for (auto* field : {&bound.vcpus, &bound.memory_mib, &bound.disk_gib}) {
    *field = *field == 0 ? kUnbounded : *field;
  }
  bound.instances = bound.instances == 0 ? kUnboundedInstances : bound.instances;
  return bound;
}

/// "3 instances, 6 vCPUs, 6144 MiB": the bounded fields that are not 0 in `shown`.
std::string amount_text(const Resources& amount, const Resources& shown) {
  std::string text;
  const auto add = [&text](std::uint64_t value, std::uint64_t show, const char* unit,
                           std::uint64_t unbounded = kUnbounded) {
    if (show != 0 && value < unbounded / 2) {
      text += (text.empty() ? "" : ", ") + std::to_string(value) + unit;
    }
  };
  add(amount.instances, shown.instances, " instances", kUnboundedInstances);
  add(amount.vcpus, shown.vcpus, " vCPUs");
  add(amount.memory_mib, shown.memory_mib, " MiB");
  add(amount.disk_gib, shown.disk_gib, " GiB of disk");
  return text;
}

constexpr Resources kEveryField{.vcpus = 1, .memory_mib = 1, .instances = 1, .disk_gib = 1};

}  // namespace

HostShares::HostShares(const SharesConfig& config, const Usage& usage, const Resources& limit,
                       std::optional<std::size_t> free_addresses)
    : config_(config),
      usage_(usage),
      limit_(limit),
      instances_bounded_(limit.instances != 0),
      disk_bounded_(limit.disk_gib != 0) {
  limit_.instances = instances_bounded_ ? limit.instances : kUnboundedInstances;
  limit_.disk_gib = disk_bounded_ ? limit.disk_gib : kUnbounded;
  free_ = minus(limit_, usage.total);
  if (free_addresses) {
    free_.instances = std::min(free_.instances, *free_addresses);
  }
  for (const auto& quota : config.quotas) {
    reserved_unused_total_ += unused_reservation(quota.controller);
  }
}

wire::Priority HostShares::priority_for(std::string_view controller,
                                        std::optional<wire::Priority> asked) const {
  const auto* quota = config_.find(controller);
  const auto cap = quota != nullptr ? quota->max_priority : wire::Priority::high;
  return std::min(asked.value_or(wire::Priority::normal), cap);
}

Resources HostShares::quota_left(const std::string& controller) const {
  const auto* quota = config_.find(controller);
  if (quota == nullptr) {
    return unbounded_where_zero({});
  }
  return minus(unbounded_where_zero(share_resources(quota->max)), usage_.of(controller));
}

Resources HostShares::unused_reservation(const std::string& controller) const {
  const auto* quota = config_.find(controller);
  return quota == nullptr ? Resources{}
                          : minus(share_resources(quota->reserved), usage_.of(controller));
}

Resources HostShares::unreserved() const {
  return minus(free_, reserved_unused_total_);
}

Resources HostShares::room_for(const std::string& controller) const {
  return min_each(free_, plus(unused_reservation(controller), unreserved()));
}

Resources HostShares::room_beyond_headroom(const std::string& controller,
                                           wire::Priority priority) const {
  const auto after_headroom =
      minus(unreserved(), share_resources(config_.headroom_of(priority_for(controller, priority))));
  return min_each(free_, plus(unused_reservation(controller), after_headroom));
}

Resources HostShares::room_at(const std::string& controller, wire::Priority priority) const {
  return min_each(room_beyond_headroom(controller, priority), quota_left(controller));
}

ShareState HostShares::share_of(const std::string& controller) const {
  const auto* quota = config_.find(controller);
  const auto max = quota != nullptr ? share_resources(quota->max) : Resources{};
  ShareState share{.controller = controller,
                   .used = usage_.of(controller),
                   .quota = max,
                   .reserved = quota != nullptr ? share_resources(quota->reserved) : Resources{},
                   .max_priority = quota != nullptr ? quota->max_priority : wire::Priority::high,
                   .room = {},
                   .instances_bounded = instances_bounded_ || max.instances != 0,
                   .disk_bounded = disk_bounded_ || max.disk_gib != 0};
  for (const auto priority : {wire::Priority::low, wire::Priority::normal, wire::Priority::high}) {
    auto room = room_at(controller, priority);
    room.instances = share.instances_bounded ? room.instances : 0;
    room.disk_gib = share.disk_bounded ? room.disk_gib : 0;
    share.room[priority] = room;
  }
  return share;
}

std::optional<Refusal> HostShares::admit(const std::string& controller, wire::Priority priority,
                                         const Resources& wanted, const Resources& kept_free,
                                         const std::string& agent_id) const {
  const auto needed = plus(wanted, kept_free);
  if (!within(needed, free_)) {
    return Refusal{RefusalReason::capacity, concat({"agent ", agent_id, " has no room: free ",
                                                    amount_text(free_, kEveryField)})};
  }
  if (!within(wanted, quota_left(controller))) {
    const auto max = share_resources(config_.find(controller)->max);
    return Refusal{RefusalReason::quota,
                   concat({"controller ", controller, " is at its quota on agent ", agent_id,
                           ": it holds ", amount_text(usage_.of(controller), max), " of at most ",
                           amount_text(max, max), " ([[quotas]] max_*)"})};
  }
  if (!within(needed, room_for(controller))) {
    const auto others = minus(reserved_unused_total_, unused_reservation(controller));
    return Refusal{
        RefusalReason::reserved,
        concat({"agent ", agent_id, " keeps the rest for other controllers' reservations: ",
                amount_text(others, others), " reserved and unused of ",
                amount_text(free_, kEveryField), " free"})};
  }
  if (!within(needed, room_beyond_headroom(controller, priority))) {
    const auto effective = priority_for(controller, priority);
    const auto kept = share_resources(config_.headroom_of(effective));
    return Refusal{RefusalReason::priority,
                   concat({"agent ", agent_id, " keeps ", amount_text(kept, kept),
                           " free for higher-priority pools; this pool's priority is ",
                           wire::to_string(effective), " ([headroom])"})};
  }
  return std::nullopt;
}

}  // namespace garm_edge::agent
