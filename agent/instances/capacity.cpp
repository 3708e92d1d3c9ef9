#include "agent/instances/capacity.hpp"

#include <algorithm>
#include <cerrno>
#include <fcntl.h>
#include <system_error>
#include <unistd.h>

#include "common/unique_fd.hpp"

namespace garm_edge::agent {
namespace {

std::uint64_t floor_at_zero(std::uint64_t value, std::uint64_t minus) {
  return value > minus ? value - minus : 0;
}

[[noreturn]] void fail_errno(const std::string& what, const std::filesystem::path& path) {
  throw std::filesystem::filesystem_error(what, path,
                                          std::error_code(errno, std::generic_category()));
}

void sync_directory(const std::filesystem::path& directory) {
  const UniqueFd dir(::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir.get() < 0 || ::fsync(dir.get()) != 0) {
    fail_errno("cannot sync", directory);
  }
}

}  // namespace

Resources& Resources::operator+=(const Resources& other) {
  vcpus += other.vcpus;
  memory_mib += other.memory_mib;
  instances += other.instances;
  disk_gib += other.disk_gib;
  return *this;
}

Resources& Resources::operator-=(const Resources& other) {
  vcpus = floor_at_zero(vcpus, other.vcpus);
  memory_mib = floor_at_zero(memory_mib, other.memory_mib);
  instances = instances > other.instances ? instances - other.instances : 0;
  disk_gib = floor_at_zero(disk_gib, other.disk_gib);
  return *this;
}

Resources limits_of(const hypervisor::HostCapacity& host, const CapacityConfig& config) {
  const auto usable_memory = floor_at_zero(host.memory_mib, config.reserved_memory_mib);
  return Resources{
      .vcpus = static_cast<std::uint64_t>(host.cpus * config.cpu_overcommit),
      .memory_mib =
          static_cast<std::uint64_t>(static_cast<double>(usable_memory) * config.memory_overcommit),
      .instances = config.max_instances,
      .disk_gib = config.disk_gib,
  };
}

bool fits(const Resources& used, const Resources& wanted, const Resources& limit) {
  return used.vcpus + wanted.vcpus <= limit.vcpus &&
         used.memory_mib + wanted.memory_mib <= limit.memory_mib &&
         (limit.instances == 0 || used.instances + wanted.instances <= limit.instances) &&
         (limit.disk_gib == 0 || used.disk_gib + wanted.disk_gib <= limit.disk_gib);
}

Resources free_of(const Resources& used, const Resources& limit) {
  auto free = limit;
  free -= used;
  return free;
}

Resources limit_within_addresses(Resources limit, const std::optional<AddressCount>& addresses) {
  if (addresses) {
    limit.instances =
        limit.instances == 0 ? addresses->total : std::min(limit.instances, addresses->total);
  }
  return limit;
}

Resources room_of(const Resources& used, const Resources& limit,
                  const std::optional<AddressCount>& addresses) {
  auto room = free_of(used, limit);
  if (addresses) {
    room.instances = std::min(room.instances, addresses->free);
  }
  return room;
}

std::string_view to_string(RefusalReason reason) {
  switch (reason) {
    case RefusalReason::quota:
      return "quota";
    case RefusalReason::reserved:
      return "reserved";
    case RefusalReason::priority:
      return "priority";
    default:
      return "capacity";
  }
}

Resources Usage::of(const std::string& controller) const {
  const auto found = by_controller.find(controller);
  return found == by_controller.end() ? Resources{} : found->second;
}

Resources min_each(const Resources& a, const Resources& b) {
  return {.vcpus = std::min(a.vcpus, b.vcpus),
          .memory_mib = std::min(a.memory_mib, b.memory_mib),
          .instances = std::min(a.instances, b.instances),
          .disk_gib = std::min(a.disk_gib, b.disk_gib)};
}

bool within(const Resources& wanted, const Resources& room) {
  return min_each(wanted, room) == wanted;
}

CapacityLedger::Hold::~Hold() {
  if (ledger_ != nullptr) {
    ledger_->release(domain_name_);
  }
}

std::variant<CapacityLedger::Hold, Refusal> CapacityLedger::reserve(
    const std::string& domain_name, const std::string& owner,
    const std::function<std::vector<InstanceResources>()>& domains, const Resources& wanted,
    const Admission& admit) {
  const std::lock_guard lock(mutex_);
  if (holds_.count(domain_name) != 0) {
    return Refusal{RefusalReason::capacity, "a create of " + domain_name + " is under way already"};
  }
  if (auto refusal = admit(usage_locked(domains()))) {
    return std::move(*refusal);
  }
  holds_.emplace(domain_name, InstanceResources{domain_name, owner, wanted});
  return Hold(*this, domain_name);
}

Usage CapacityLedger::usage(const std::vector<InstanceResources>& domains) const {
  const std::lock_guard lock(mutex_);
  return usage_locked(domains);
}

bool CapacityLedger::under_way(const std::string& domain_name) const {
  const std::lock_guard lock(mutex_);
  return holds_.count(domain_name) != 0;
}

std::vector<std::string> CapacityLedger::under_way() const {
  const std::lock_guard lock(mutex_);
  std::vector<std::string> domains;
  domains.reserve(holds_.size());
  for (const auto& [domain_name, resources] : holds_) {
    domains.push_back(domain_name);
  }
  return domains;
}

Usage CapacityLedger::usage_locked(const std::vector<InstanceResources>& domains) const {
  Usage usage;
  const auto count = [&usage](const InstanceResources& instance) {
    usage.total += instance.resources;
    usage.by_controller[instance.owner] += instance.resources;
  };
  for (const auto& domain : domains) {
    if (holds_.count(domain.domain_name) == 0) {
      count(domain);
    }
  }
  for (const auto& [name, held] : holds_) {
    count(held);
  }
  return usage;
}

void CapacityLedger::release(const std::string& domain_name) {
  const std::lock_guard lock(mutex_);
  holds_.erase(domain_name);
}

DrainSwitch::DrainSwitch(std::filesystem::path marker) : marker_(std::move(marker)) {
  on_ = std::filesystem::exists(marker_);
}

bool DrainSwitch::on() const {
  const std::lock_guard lock(mutex_);
  return on_;
}

void DrainSwitch::set(bool draining) {
  const std::lock_guard lock(mutex_);
  if (draining == on_) {
    return;
  }
  // Kept or not at all: a switch that fails must not come into force at the next restart.
  try {
    if (draining) {
      const UniqueFd file(
          ::open(marker_.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
      if (file.get() < 0 || ::fsync(file.get()) != 0) {
        fail_errno("cannot create", marker_);
      }
    } else if (::unlink(marker_.c_str()) != 0 && errno != ENOENT) {
      fail_errno("cannot remove", marker_);
    }
    sync_directory(marker_.parent_path());
  } catch (const std::filesystem::filesystem_error&) {
    if (draining) {
      ::unlink(marker_.c_str());
    }
    throw;
  }
  on_ = draining;
}

}  // namespace garm_edge::agent
