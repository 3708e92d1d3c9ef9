#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "agent/base/cache_config.hpp"
#include "agent/base/mirror_config.hpp"
#include "agent/base/shape_config.hpp"
#include "common/config_error.hpp"
#include "hypervisor/libvirt_options.hpp"
#include "net/address_range.hpp"
#include "net/http_client.hpp"
#include "wire/enums.hpp"

namespace garm_edge::agent {

using garm_edge::ConfigError;

/// Where the agent pulls an image from (docs/images.md): a URL and the digest that proves it.
struct ImageSourceConfig {
  std::string url;               // https:// or http://: a qcow2 or raw image, maybe xz-compressed
  std::string sha256;            // 64 lower-case hex digits; empty when checksums_url is set
  std::string checksums_url;     // a SHA256SUMS/SHA512SUMS-style file that lists the URL's file
  std::string format = "qcow2";  // of the image inside the compression, never probed
  bool xz = false;               // the URL's file name ends in ".xz"

  /// The last part of the URL's path: the name a checksum file lists.
  std::string file_name() const;
  bool operator==(const ImageSourceConfig&) const = default;
};

/// A base image guests boot from. The agent never writes to it: every guest gets a qcow2
/// overlay backed by it.
struct ImageConfig {
  std::string name;
  /// At least one of these: a volume in the agent's storage pool or an absolute file path
  /// (at most one of the two), or a source the agent pulls. With a local base and a source,
  /// the local base serves until the pulled one is ready.
  std::string base_volume;
  std::string base_path;
  std::string base_format = "qcow2";
  wire::OsType os_type = wire::OsType::linux;
  std::string os_name;
  std::string os_version;
  wire::OsArch arch = wire::OsArch::amd64;
  std::optional<ImageSourceConfig> source;
};

struct FlavorConfig {
  std::string name;
  unsigned vcpus = 1;
  std::uint64_t memory_mib = 1024;
  std::uint64_t disk_gib = 20;
};

/// Guests of one image and flavor kept booted ahead of demand for one garm controller
/// (docs/warm-guests.md).
struct WarmConfig {
  /// The controller (a UUID) whose creates alone may take these guests: whatever a guest was
  /// prepared with for one controller never reaches another's instance. Read from the entry, or
  /// the one controller [[api.clients]] name when the agent serves only one.
  std::string controller;
  std::string image;
  std::string flavor;
  std::size_t count = 1;
  /// A warm guest not ready this long after it was created is destroyed (and counted wasted).
  std::chrono::seconds ready_timeout{900};
  std::string name;  // "image/flavor for <controller>", unique among [[warm]] entries
};

/// A client identity (a certificate's CN or URI SAN) and the garm controllers it may act for.
struct ApiClient {
  std::string identity;
  std::vector<std::string> controllers;  // UUIDs; "*" for any
};

/// The mutual-TLS control API (`serve`).
struct ApiConfig {
  bool enabled = false;  // an [api] section is present
  std::string address = "0.0.0.0";
  std::uint16_t port = 8443;
  std::filesystem::path ca;
  std::filesystem::path crl;
  std::filesystem::path certificate;
  std::filesystem::path key;
  std::size_t max_connections = 256;
  std::size_t workers = 8;  // threads that run commands (they block on libvirt)
  /// Only these peers are served; anyone else is closed at accept. Empty: any address.
  std::vector<net::AddressRange> allow;
  std::vector<ApiClient> clients;

  /// Is any of `identities` (CN and URI SANs of one certificate) in [[api.clients]]?
  bool knows(const std::vector<std::string>& identities) const;
  /// May `identities` (CN and URI SANs of one certificate) act for `controller_id`?
  bool allows(const std::vector<std::string>& identities, std::string_view controller_id) const;
  /// May `identities` act for every controller (`controllers = ["*"]`), as host-wide
  /// operations (draining) need?
  bool allows_every_controller(const std::vector<std::string>& identities) const;
  /// May any client act for `controller_id`?
  bool has_client_for(std::string_view controller_id) const;
  /// The one controller every client acts for; nothing when the clients name none, more than
  /// one, or any (`"*"`): then the agent serves more than one controller, or none it can name.
  std::optional<std::string> sole_controller() const;
};

/// How a guest proves which instance it is, on top of its unguessable token.
enum class AntiSpoofing {
  automatic,      // clean-traffic where the host has it, else source_ip; fails where neither works
  clean_traffic,  // libvirt's stock filter (MAC, IP and ARP spoofing)
  source_ip,      // the agent's own filter: IPv4 only from the reserved address
  off,            // no filter: any guest on the network can claim another's address
};

/// The plain-HTTP service guests reach at first boot: their NoCloud seed and garm's
/// callback and metadata endpoints.
struct GuestConfig {
  bool enabled = false;  // a [guests] section is present
  /// Where the service listens, and the host part of the URLs guests are given. Empty: the
  /// network's gateway address (the host's own address on the guests' bridge).
  std::string address;
  std::uint16_t port = 8775;
  /// relay: guests call the agent, which forwards to garm; direct: guests call garm.
  bool relay = true;
  /// Addresses the agent reserves for guests, "first-last". Empty: the network's subnet
  /// outside its DHCP ranges.
  std::string addresses;
  AntiSpoofing anti_spoofing = AntiSpoofing::automatic;
  std::chrono::seconds relay_timeout{30};
  std::size_t max_connections = 512;
  /// How long a deleted guest's address rests before another guest gets it. ARP and DHCP need
  /// no rest (every guest at an address has its MAC); the guest service's state per source
  /// address does: a guest that guessed tokens is refused for up to 60 s, and its successor
  /// must not inherit that (docs/guests.md).
  std::chrono::seconds address_quarantine{60};
  /// The runner archive cache under `<state_dir>/runner-archives`: each archive downloaded once
  /// per host and served to guests. 0: off (guests download from garm's URL themselves).
  std::uint64_t runner_cache_mib = 4096;
  std::chrono::seconds runner_download_timeout{900};
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
};

/// How images with a `source` are pulled: one pull per image at a time, the bases kept in
/// `directory`.
struct PullConfig {
  std::filesystem::path directory;  // empty: beside state_dir, "<state_dir>-images"
  /// What pulled bases and downloads under way may take together; 0: the disk's free space.
  std::uint64_t quota_bytes = 0;
  std::uint64_t bytes_per_second = 0;  // 0: as fast as the network allows
  net::ProxySettings proxies;
  std::filesystem::path ca_bundle;  // PEM file trusted besides the system's CAs
  /// How often a checksum file is fetched again to find a new version.
  std::chrono::seconds recheck{std::chrono::hours(6)};
  /// One pull: the download, its verification and the conversion.
  std::chrono::seconds timeout{std::chrono::hours(2)};
  /// A source that sends no byte for this long is given up (and retried a minute later).
  std::chrono::seconds stall{60};
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
