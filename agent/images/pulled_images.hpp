#pragma once

#include <memory>

#include "agent/base/config.hpp"
#include "agent/base/log.hpp"
#include "agent/images/image_store.hpp"
#include "hypervisor/hypervisor.hpp"

namespace garm_edge::agent {

/// The image store with its real boundaries: HTTP(S), qemu-img and xz, the host's disk.
class PulledImages {
 public:
  PulledImages(const AgentConfig& config, const std::filesystem::path& base_dir, Logger& log);
  ImageStore& store() { return store_; }

 private:
  HttpImageFetcher fetcher_;
  HostImageTools tools_;
  HostPullDisk disk_;
  ImageStore store_;
};

/// Nothing when no `[[images]]` entry has a source. The bases go to [pull] directory, else to
/// the storage pool's directory. Throws ConfigError when that cannot be found or made, or the
/// host has no qemu-img.
std::unique_ptr<PulledImages> make_pulled_images(const AgentConfig& config,
                                                 hypervisor::Hypervisor& hypervisor, Logger& log);

}  // namespace garm_edge::agent
