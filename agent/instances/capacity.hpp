#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "agent/base/config.hpp"
#include "hypervisor/hypervisor.hpp"

namespace garm_edge::agent {

/// What instances take of a host, or what a host offers them.
struct Resources {
  std::uint64_t vcpus = 0;
  std::uint64_t memory_mib = 0;
  std::size_t instances = 0;
  /// Guests' disks at their full size: root and scratch (0 in a limit: not counted).
  std::uint64_t disk_gib = 0;

  Resources& operator+=(const Resources& other);
  Resources& operator-=(const Resources& other);
  bool operator==(const Resources&) const = default;
};

/// A host's limits: its CPUs and memory from libvirt with the configured overcommit and
/// reserve, and max_instances (instances 0: no limit).
Resources limits_of(const hypervisor::HostCapacity& host, const CapacityConfig& config);

/// Does `used` plus `wanted` stay within `limit`?
bool fits(const Resources& used, const Resources& wanted, const Resources& limit);

/// `limit` minus `used`, each floored at 0 (instances and disk: 0 when there is no limit).
Resources free_of(const Resources& used, const Resources& limit);

/// The guest addresses of the agent's range (`[guests]`): every instance holds one, and one
/// given back rests for `address_quarantine` before another guest gets it.
struct AddressCount {
  std::size_t total = 0;
  std::size_t held = 0;     // reserved in the network, or chosen by a create under way
  std::size_t resting = 0;  // given back lately, not handed out again yet
  std::size_t free = 0;     // neither held nor resting: what the next creates can have

  bool operator==(const AddressCount&) const = default;
};

/// `limit` holding no more instances than the range has addresses; unchanged without guest
/// addresses.
Resources limit_within_addresses(Resources limit, const std::optional<AddressCount>& addresses);

/// What the host can still take: `free_of(used, limit)`, and no more instances than there are
/// free guest addresses (a create without one is refused).
Resources room_of(const Resources& used, const Resources& limit,
                  const std::optional<AddressCount>& addresses);

/// One instance's resources, by its libvirt domain name, and the controller it counts for
/// (a warm guest: the one it is kept for).
struct InstanceResources {
  std::string domain_name;
  std::string owner;
  Resources resources;
};

/// Why a create was refused before any work (docs/shares.md): the host is full, the
/// controller is at its quota, the room left is reserved for other controllers, or it is kept
/// for higher-priority pools.
enum class RefusalReason { capacity, quota, reserved, priority };
inline constexpr std::array<RefusalReason, 4> kRefusalReasons = {
    RefusalReason::capacity, RefusalReason::quota, RefusalReason::reserved,
    RefusalReason::priority};
std::string_view to_string(RefusalReason reason);

struct Refusal {
  RefusalReason reason = RefusalReason::capacity;
  std::string message;
};

/// What the host's instances and the creates under way take, in all and by controller.
struct Usage {
  Resources total;
  std::map<std::string, Resources> by_controller;

  Resources of(const std::string& controller) const;
};

/// Each field the smaller of the two.
Resources min_each(const Resources& a, const Resources& b);
/// Is every field of `wanted` at most that of `room`?
bool within(const Resources& wanted, const Resources& room);

/// The warm guests of one `[[warm]]` entry that a create of its controller, image and flavor
/// can take.
struct WarmCount {
  std::string controller;
  std::string image;
  std::string flavor;
  std::size_t ready = 0;  // running, or saved to disk (a create restores it)
  std::size_t warming = 0;
};

/// What placement needs to know of this host, in one answer.
struct CapacityReport {
  hypervisor::HostCapacity host;
  /// The CPUs, memory and max_instances the agent may give out; no more instances than it has
  /// guest addresses.
  Resources limit;
  /// Every instance the agent holds, of any controller, and the creates under way.
  Resources used;
  /// `used` by the controller each counts for.
  Usage usage;
  /// `limit` minus `used`, and no more instances than free guest addresses.
  Resources free;
  /// Nothing without `[guests]` (guests get no address).
  std::optional<AddressCount> addresses;
  bool draining = false;
  /// The agent's domains by power state (running, shutoff, ...).
  std::map<std::string, std::size_t> by_state;
  std::vector<WarmCount> warm;  // one per [[warm]] entry
  /// Every instance the agent holds or is creating, as (controller ID, garm's name); a bound
  /// warm guest under the instance it became.
  std::vector<std::pair<std::string, std::string>> instances;
};

/// Creates under way, counted against the host from before they start until they return. A
/// create reserves its flavor's resources atomically with reading what the existing domains
/// take, so two creates can never both take the last slot; an instance whose create is under
/// way is counted once, by its hold, whether or not its domain exists yet.
class CapacityLedger {
 public:
  /// Releases its reservation when destroyed.
  class Hold {
   public:
    Hold(CapacityLedger& ledger, std::string domain_name)
        : ledger_(&ledger), domain_name_(std::move(domain_name)) {}
    Hold(Hold&& other) noexcept
        : ledger_(other.ledger_), domain_name_(std::move(other.domain_name_)) {
      other.ledger_ = nullptr;
    }
    Hold(const Hold&) = delete;
    Hold& operator=(const Hold&) = delete;
    Hold& operator=(Hold&&) = delete;
    ~Hold();

   private:
    CapacityLedger* ledger_;
    std::string domain_name_;
  };

  /// Says why a create may not go ahead given what is used now; nothing when it may.
  using Admission = std::function<std::optional<Refusal>(const Usage&)>;

  /// `domains` lists what the host's existing domains take; it runs under the ledger's lock,
  /// so a create that finishes meanwhile is counted once, and `admit` decides on that. Holds
  /// `wanted` for `owner` and nothing else; what `admit` said when it refused (or that a
  /// create of `domain_name` is under way already).
  std::variant<Hold, Refusal> reserve(
      const std::string& domain_name, const std::string& owner,
      const std::function<std::vector<InstanceResources>()>& domains, const Resources& wanted,
      const Admission& admit);
  /// What `domains` and the creates under way take together, each instance once.
  Usage usage(const std::vector<InstanceResources>& domains) const;
  /// Is a create of this domain under way (queued or running)?
  bool under_way(const std::string& domain_name) const;
  /// The domains whose creates are under way.
  std::vector<std::string> under_way() const;

 private:
  Usage usage_locked(const std::vector<InstanceResources>& domains) const;
  void release(const std::string& domain_name);

  mutable std::mutex mutex_;
  std::map<std::string, InstanceResources> holds_;
};

/// The operator's runtime draining switch, kept across restarts as a file in the state
/// directory (a host emptied for maintenance must not take creates after a crash).
class DrainSwitch {
 public:
  /// Throws std::filesystem::filesystem_error when the marker cannot be read.
  explicit DrainSwitch(std::filesystem::path marker);
  bool on() const;
  /// Throws std::filesystem::filesystem_error (and changes nothing) when it cannot be kept.
  void set(bool draining);

 private:
  std::filesystem::path marker_;
  mutable std::mutex mutex_;
  bool on_ = false;
};

}  // namespace garm_edge::agent
