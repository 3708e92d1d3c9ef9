#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "agent/base/config.hpp"
#include "agent/base/log.hpp"

namespace garm_edge::agent {

/// The docker-registry config the mirror runs with (JSON, which its YAML reader takes): proxy
/// mode to the upstream, storage under `storage`, listening on the unix socket `socket`, no
/// access log. `credentials` is "username:password" or empty.
std::string registry_mirror_config(const MirrorConfig& mirror, const std::filesystem::path& storage,
                                   const std::filesystem::path& socket,
                                   const std::string& credentials);

/// A pull-through registry on a unix socket in the agent's private mirror directory
/// (docs/caches.md): Debian's docker-registry run and watched by the agent. It is restarted when it
/// dies (after 5 s), and emptied (it is a cache) when its storage passes max_bytes. Guests reach it
/// only through the guest service.
class RegistryMirror {
 public:
  /// Throws ConfigError when its directory or credentials cannot be used.
  RegistryMirror(const AgentConfig& config, Logger& log);
  ~RegistryMirror();
  RegistryMirror(const RegistryMirror&) = delete;
  RegistryMirror& operator=(const RegistryMirror&) = delete;

  /// Starts the registry and waits (up to `ready_within`) until it answers /v2/.
  void start(std::chrono::milliseconds ready_within = std::chrono::seconds(30));
  void stop();

  /// Where the registry listens: `<mirror directory>/registry.sock` (the directory is 0700).
  std::filesystem::path socket() const;
  /// Where the registry keeps its blobs ("…/docker/registry/v2/blobs"): a blob found there
  /// before a guest asks for it is a hit.
  std::filesystem::path blob_root() const;
  /// Is the registry answering now?
  bool up() const { return up_.load(); }
  std::string render_metrics() const;
  /// Bytes under its storage, as the last check counted them.
  std::uint64_t stored_bytes() const { return stored_bytes_.load(); }
  /// Counts its storage; past max_bytes, the registry is stopped, emptied and started again
  /// (the watch loop runs this every minute; tests call it).
  void enforce_bound();

 private:
  void run();
  bool answers() const;

  const MirrorConfig& config_;
  std::filesystem::path directory_;
  std::filesystem::path storage_;
  std::filesystem::path config_file_;
  std::filesystem::path socket_;
  Logger& log_;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> restart_{false};  // ends the running registry: the loop starts it again
  std::atomic<bool> flush_requested_{false};
  std::atomic<bool> up_{false};
  std::atomic<std::uint64_t> stored_bytes_{0};
  std::atomic<std::uint64_t> restarts_{0};
  std::atomic<std::uint64_t> flushes_{0};
  std::mutex mutex_;
  std::condition_variable wake_;
  std::thread thread_;
};

}  // namespace garm_edge::agent
