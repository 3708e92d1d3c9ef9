#pragma once

#include <filesystem>
#include <ostream>
#include <string>

namespace garm_edge::agent {

struct DemoOptions {
  std::string uri = "test:///default";
  std::string storage_pool = "default-pool";
  std::string network = "default";
  std::filesystem::path state_dir;  // empty: a fresh temporary directory
};

/// Drives the instance service through a whole lifecycle against a libvirt URI (by default
/// libvirt's built-in test driver) and prints each step. Returns 0 when every step behaved.
int run_demo(const DemoOptions& options, std::ostream& out);

}  // namespace garm_edge::agent
