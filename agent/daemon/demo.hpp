#pragma once

#include <filesystem>
#include <optional>
#include <ostream>
#include <string>

#include "agent/base/config.hpp"
#include "hypervisor/guest_arch.hpp"
#include "wire/bootstrap.hpp"

namespace garm_edge::agent {

struct DemoOptions {
  std::string uri = "test:///default";
  std::string storage_pool = "default-pool";
  std::string network = "default";
  /// The demo image's base: a volume name in the storage pool, or an absolute file path. The
  /// test driver accepts any; a real host needs a real image.
  std::string base_image = "/var/lib/garm-edge/images/debian-12.qcow2";
  std::filesystem::path state_dir;  // empty: a fresh temporary directory
  /// Unset: what the host's capabilities offer (as [libvirt] virt_type = "auto").
  std::optional<hypervisor::VirtType> virt_type;
};

/// The config the demo (and the benchmark) runs with: one image "debian-12", one flavor "small".
AgentConfig demo_config(const DemoOptions& options, const std::filesystem::path& state_dir);
/// A bootstrap for that image and flavor.
wire::BootstrapInstance demo_bootstrap(const std::string& name, const std::string& pool_id);

/// Drives the instance service through a whole lifecycle against a libvirt URI (by default
/// libvirt's built-in test driver) and prints each step. Returns 0 when every step behaved.
int run_demo(const DemoOptions& options, std::ostream& out);

}  // namespace garm_edge::agent
