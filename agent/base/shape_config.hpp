#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace garm_edge::agent {

/// What a pool may ask for through its extra specs (docs/extra-specs.md), beyond its flavor.
struct ExtraSpecLimits {
  /// The largest root disk a pool may ask for; 0: none larger than its flavor's.
  std::uint64_t max_root_disk_gib = 0;
  /// May pools ask for nested virtualization (on a host whose KVM offers it)? Off: every
  /// emulated device a guest's own hypervisor reaches is host code it attacks.
  bool nested_virtualization = false;
};

/// Owners of a shared host resource: empty, any controller the agent serves.
struct ControllerScope {
  std::vector<std::string> controllers;  // UUIDs, lower case

  bool serves(std::string_view controller) const;
};

/// A local libvirt storage pool scratch disks may be made on, under a name pools use.
struct ScratchPoolConfig {
  std::string name;          // what extra specs name: [a-z0-9-], 1-24
  std::string storage_pool;  // the libvirt storage pool
  std::uint64_t max_disk_gib = 100;
  ControllerScope scope;
};

/// A libvirt network or a host bridge a pool may give its guests a further NIC on.
struct NetworkConfig {
  std::string name;     // what extra specs name
  std::string network;  // a libvirt network, or
  std::string bridge;   // a host bridge
  ControllerScope scope;
};

}  // namespace garm_edge::agent
