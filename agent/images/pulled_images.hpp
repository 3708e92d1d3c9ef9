#pragma once

#include <memory>

#include "agent/base/config.hpp"
#include "agent/base/log.hpp"
#include "agent/images/image_store.hpp"

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

/// Where the bases go: [pull] directory, else beside the state directory
/// (/var/lib/garm-edge -> /var/lib/garm-edge-images, which the package makes).
std::filesystem::path default_base_directory(const AgentConfig& config);

/// Nothing when no `[[images]]` entry has a source. Throws ConfigError when the base directory
/// cannot be made or written, or the host has no qemu-img.
std::unique_ptr<PulledImages> make_pulled_images(const AgentConfig& config, Logger& log);

}  // namespace garm_edge::agent
