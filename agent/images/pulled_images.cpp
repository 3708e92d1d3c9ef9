#include "agent/images/pulled_images.hpp"

#include <algorithm>
#include <unistd.h>

#include "common/subprocess.hpp"

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
                               .retry_after_failure = std::chrono::minutes(1),
                               .retired_grace = config.replaced_grace},
             fetcher_, tools_, disk_, log) {}

std::filesystem::path default_base_directory(const AgentConfig& config) {
  if (!config.pull.directory.empty()) {
    return config.pull.directory;
  }
  const auto state = config.state_dir.lexically_normal();
  const auto name = state.has_filename() ? state.filename() : state.parent_path().filename();
  return state.parent_path() / (name.string() + "-images");
}

std::unique_ptr<PulledImages> make_pulled_images(const AgentConfig& config, Logger& log) {
  if (std::none_of(config.images.begin(), config.images.end(),
                   [](const ImageConfig& image) { return image.source.has_value(); })) {
    return nullptr;
  }
  // The tools are run from the system's directories only (common/subprocess.hpp): the same
  // lookup as the pulls' own, so this check and the pull never disagree.
  if (!find_system_program("qemu-img")) {
    throw ConfigError("images with a source need qemu-img in " + system_program_path() +
                      " (Debian: apt install qemu-utils)");
  }
  const auto base_dir = default_base_directory(config);
  std::error_code ec;
  if (std::filesystem::create_directories(base_dir, ec)) {
    // QEMU (libvirt-qemu) opens the bases: the agent's umask would make it private.
    std::filesystem::permissions(base_dir, std::filesystem::perms(0755), ec);
  }
  if (!std::filesystem::is_directory(base_dir) || ::access(base_dir.c_str(), W_OK) != 0) {
    throw ConfigError("image bases go to " + base_dir.string() +
                      ", which is not a directory the agent can write: make it, or set [pull] "
                      "directory");
  }
  return std::make_unique<PulledImages>(config, base_dir, log);
}

}  // namespace garm_edge::agent
