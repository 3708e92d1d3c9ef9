#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "agent/base/share_config.hpp"
#include "agent/instances/capacity.hpp"

namespace garm_edge::agent {

/// An amount of agent.toml as the resources it bounds (instances no more than std::size_t holds).
Resources share_resources(const ShareAmount& amount);

/// Refusals by reason since start, for /metrics.
class RefusalCounters {
 public:
  void count(RefusalReason reason) { ++counts_.at(static_cast<std::size_t>(reason)); }
  std::uint64_t of(RefusalReason reason) const {
    return counts_.at(static_cast<std::size_t>(reason)).load();
  }

 private:
  std::array<std::atomic<std::uint64_t>, kRefusalReasons.size()> counts_{};
};

/// One controller's share as it stands: what it takes, what the operator gives and keeps for
/// it, and the room a create of it has at each priority. Instances and disk are bounded only
/// when the host or its quota bounds them (else their room is 0 and means nothing).
struct ShareState {
  std::string controller;
  Resources used;
  Resources quota;     // a field 0: none
  Resources reserved;  // a field 0: none
  wire::Priority max_priority = wire::Priority::high;
  std::map<wire::Priority, Resources> room;
  bool instances_bounded = false;
  bool disk_bounded = false;
};

/// The arithmetic of shares on one host (docs/shares.md), from what every controller takes
/// now: a create of controller C at priority P fits when it fits the host's free room, C's
/// quota, the room other controllers' unused reservations leave, and, beyond C's own unused
/// reservation, the headroom the operator keeps free of priority P.
class HostShares {
 public:
  /// `limit`: the host's (instances 0: none, disk 0: not counted), already no more instances
  /// than guest addresses; `free_addresses`: nothing without [guests].
  HostShares(const SharesConfig& config, const Usage& usage, const Resources& limit,
             std::optional<std::size_t> free_addresses);

  /// The pool's priority as the operator caps it for `controller`; normal when it names none.
  wire::Priority priority_for(std::string_view controller,
                              std::optional<wire::Priority> asked) const;
  ShareState share_of(const std::string& controller) const;
  /// Nothing when a create of `controller` at `priority` may take `wanted` and leave
  /// `kept_free` free besides (a warm guest leaves room for one cold create, which is not
  /// its controller's to count); else why not, in words garm shows (`agent_id`: the host).
  std::optional<Refusal> admit(const std::string& controller, wire::Priority priority,
                               const Resources& wanted, const Resources& kept_free,
                               const std::string& agent_id) const;

 private:
  Resources quota_left(const std::string& controller) const;
  Resources unused_reservation(const std::string& controller) const;
  /// Free room no controller's unused reservation holds.
  Resources unreserved() const;
  /// What a create of `controller` may take before the priority headroom applies.
  Resources room_for(const std::string& controller) const;
  /// Within the headroom `priority` leaves, without the quota.
  Resources room_beyond_headroom(const std::string& controller, wire::Priority priority) const;
  Resources room_at(const std::string& controller, wire::Priority priority) const;

  const SharesConfig& config_;
  Usage usage_;      // a copy: one entry per controller, and no reference to outlive
  Resources limit_;  // unbounded fields as kUnbounded
  Resources free_;
  Resources reserved_unused_total_;
  bool instances_bounded_;
  bool disk_bounded_;
};

}  // namespace garm_edge::agent
