#include "agent/images/pulled_images.hpp"

#include <algorithm>
#include <unistd.h>

namespace garm_edge::agent {

PulledImages::PulledImages(const AgentConfig& config, const std::filesystem::path& base_dir,
                           Logger& log)
    : fetcher_(config.pull),
      tools_(config.pull.timeout),
      disk_(config.pull.quota_bytes, {base_dir, config.state_dir / "images" / "downloads"}),
      store_(config.images,
             ImageStoreOptions{.state_dir = config.state_dir,
                               .base_dir = base_dir,
                               .bytes_per_second = config.pull.bytes_per_second,
                               .recheck = config.pull.recheck,
                               .retry_after_failure = std::chrono::minutes(1)},
             fetcher_, tools_, disk_, log) {}

std::unique_ptr<PulledImages> make_pulled_images(const AgentConfig& config,
                                                 hypervisor::Hypervisor& hypervisor, Logger& log) {
  if (std::none_of(config.images.begin(), config.images.end(),
                   [](const ImageConfig& image) { return image.source.has_value(); })) {
    return nullptr;
  }
  // The tools are run from the system's directories only (common/subprocess.hpp).
  if (::access("/usr/bin/qemu-img", X_OK) != 0 && ::access("/usr/local/bin/qemu-img", X_OK) != 0) {
    throw ConfigError("images with a source need qemu-img (Debian: apt install qemu-utils)");
  }
  auto base_dir = config.pull.directory;
  if (base_dir.empty()) {
    try {
      base_dir = hypervisor.pool_path(config.storage_pool);
    } catch (const std::exception& e) {
      throw ConfigError("images with a source go to storage pool \"" + config.storage_pool +
                        "\"'s directory, which libvirt did not give (" + e.what() +
                        "): set [pull] directory");
    }
  }
  std::error_code ec;
  std::filesystem::create_directories(base_dir, ec);
  if (!std::filesystem::is_directory(base_dir)) {
    throw ConfigError("[pull] directory " + base_dir.string() + " is not a directory I can make");
  }
  return std::make_unique<PulledImages>(config, base_dir, log);
}

}  // namespace garm_edge::agent
