#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "wire/enums.hpp"

namespace garm_edge::wire {

/// An empty disk a guest gets on a named local storage pool of the agent (e.g. NVMe), formatted
/// and mounted at `mount` before the runner starts; it goes with the guest.
struct ScratchDiskRequest {
  std::string pool;  // a [[scratch_pools]] name of the agent
  std::uint64_t size_gib = 0;
  std::string mount;  // absolute guest path

  bool operator==(const ScratchDiskRequest&) const = default;
};

/// The hypervisor a pool needs: any (the host's best for the architecture), KVM only, or
/// emulation (TCG) even where KVM is there.
enum class VirtTypeRequest { any, kvm, qemu };

std::string_view to_string(VirtTypeRequest request);

/// The shape a pool asks for in its extra specs beyond its flavor (docs/extra-specs.md).
/// Parsed once at the edge; the agent checks it against its operator's limits, the provider
/// places by it.
struct PoolShape {
  std::optional<std::uint64_t> root_disk_gib;  // none: the flavor's disk
  std::vector<ScratchDiskRequest> scratch_disks;
  std::vector<std::string> networks;  // further NICs, on [[networks]] of the agent by name
  bool nested_virtualization = false;
  VirtTypeRequest virt_type = VirtTypeRequest::any;

  /// True for a pool that asks for nothing beyond its flavor: any guest of its image and
  /// flavor (a warm one too) fits it.
  bool is_default() const;
  bool operator==(const PoolShape&) const = default;
};

inline constexpr std::size_t kMaxScratchDisks = 4;
inline constexpr std::size_t kMaxExtraNetworks = 4;
inline constexpr std::uint64_t kMaxDiskGib = 64 * 1024;
inline constexpr std::size_t kMaxCachesPerPool = 8;

/// Names of scratch pools and networks, as agent.toml and extra specs give them.
bool is_shape_name(std::string_view name);
/// An absolute guest path of plain characters without "..": safe in a shell word and in fstab.
bool is_plain_guest_path(std::string_view path);

/// Reads the shape keys of a pool's extra specs; the others are left to their readers. Throws
/// WireError naming the field (`extra_specs.scratch_disks[1].size_gib`) for a wrong value.
PoolShape parse_pool_shape(const std::optional<nlohmann::json>& extra_specs);

/// The `caches` a pool's extra specs name (docs/caches.md): at most 8 distinct cache names.
/// Throws WireError for anything else; whether the agent has them is the agent's to say.
std::vector<std::string> parse_cache_names(const std::optional<nlohmann::json>& extra_specs);

/// The pool's `priority` extra spec (docs/shares.md): low, normal or high; nothing when absent.
/// Throws WireError for anything else.
std::optional<Priority> parse_priority(const std::optional<nlohmann::json>& extra_specs);

}  // namespace garm_edge::wire
