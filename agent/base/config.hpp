#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "agent/base/api_config.hpp"
#include "agent/base/cache_config.hpp"
#include "agent/base/guest_config.hpp"
#include "agent/base/image_config.hpp"
#include "agent/base/mirror_config.hpp"
#include "agent/base/shape_config.hpp"
#include "agent/base/share_config.hpp"
#include "common/config_error.hpp"
#include "hypervisor/libvirt_options.hpp"

namespace garm_edge::agent {

using garm_edge::ConfigError;

struct FlavorConfig {
  std::string name;
  unsigned vcpus = 1;
  std::uint64_t memory_mib = 1024;
  std::uint64_t disk_gib = 20;
};

/// How much of the host the agent's instances may take. Every instance the agent holds counts,
/// stopped ones too: garm may start them again.
struct CapacityConfig {
  /// vCPUs per host CPU.
  double cpu_overcommit = 4.0;
  /// Guest memory per MiB of host memory (after the reserve).
  double memory_overcommit = 1.0;
  /// Host memory kept for the host itself.
  std::uint64_t reserved_memory_mib = 1024;
  /// 0: no limit beyond CPUs and memory.
  std::size_t max_instances = 0;
  /// What guests' disks (root and scratch, at their full size) may add up to; 0: not counted.
  std::uint64_t disk_gib = 0;
  /// What saved warm guests' memory files may add up to (GiB of their flavors' memory); 0: no
  /// bound of its own (they still count in disk_gib).
  std::uint64_t max_saved_gib = 0;
};

struct AgentConfig {
  /// Written into every domain's tags; reconcile touches only domains that carry it. Must stay
  /// stable for the life of the host's instances.
  std::string agent_id;
  std::filesystem::path state_dir = "/var/lib/garm-edge";
  std::size_t max_concurrent_creates = 8;
  std::chrono::seconds reconcile_interval{60};
  std::chrono::seconds stop_grace{30};
  /// How long a replaced image base or cache generation stays at least, even unused: a create
  /// may have planned onto it just before the swap.
  std::chrono::seconds replaced_grace{std::chrono::minutes(15)};
  /// A runner start not idle after this long counts as a bootstrap timeout in /metrics: garm's
  /// pool runner_bootstrap_timeout (20 minutes by default).
  std::chrono::seconds startup_timeout{std::chrono::minutes(20)};
  /// Takes no new creates (deletes, lookups and everything else go on); also settable at
  /// runtime through the API, kept in the state directory.
  bool draining = false;
  CapacityConfig capacity;

  hypervisor::LibvirtOptions libvirt;
  std::string storage_pool = "default";
  std::string network;  // libvirt network guests attach to; empty: no network interface

  std::vector<ImageConfig> images;
  PullConfig pull;
  std::vector<FlavorConfig> flavors;
  std::vector<WarmConfig> warm;
  std::vector<CacheConfig> caches;
  ExtraSpecLimits extra_specs;
  std::vector<ScratchPoolConfig> scratch_pools;
  std::vector<NetworkConfig> networks;
  /// How the controllers that share the host share it: [[quotas]] and [headroom].
  SharesConfig shares;
  /// Where cache generations are kept; empty: beside state_dir, "<state_dir>-caches".
  std::filesystem::path caches_dir;
  MirrorConfig mirror;
  ApiConfig api;
  GuestConfig guests;

  const ImageConfig* find_image(std::string_view name) const;
  const FlavorConfig* find_flavor(std::string_view name) const;
  const CacheConfig* find_cache(std::string_view name) const;
  const ScratchPoolConfig* find_scratch_pool(std::string_view name) const;
  const NetworkConfig* find_network(std::string_view name) const;
  /// caches_dir, or its default.
  std::filesystem::path cache_directory() const;
  /// mirror.directory, or its default.
  std::filesystem::path mirror_directory() const;
};

/// Parses and validates agent TOML. Unknown keys are errors: a typo must not silently fall
/// back to a default on a host nobody watches.
AgentConfig parse_agent_config(std::string_view toml_text, const std::string& source_name);
AgentConfig load_agent_config(const std::filesystem::path& path);

/// The JSON Schema of agent.toml (served at /v1/schemas/config).
std::string agent_config_json_schema();

}  // namespace garm_edge::agent
