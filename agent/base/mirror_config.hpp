#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

namespace garm_edge::agent {

/// A pull-through container registry on the host (docs/caches.md): Debian's docker-registry
/// (distribution 2.8) in proxy mode, run by the agent on loopback, reached by guests through
/// the guest service at `/v2/`.
struct MirrorConfig {
  bool enabled = false;  // a [mirror] section is present
  /// The registry it mirrors; distribution proxies exactly one.
  std::string upstream = "https://registry-1.docker.io";
  /// A file of one line "username:password" for the upstream (0600, the agent's own); empty:
  /// anonymous. What it pulls with these is served to every guest of the host.
  std::filesystem::path credentials;
  std::filesystem::path directory;  // empty: beside state_dir, "<state_dir>-mirror"
  /// Past this the mirror is emptied and refills from upstream: a cache, never the only copy.
  std::uint64_t max_bytes = std::uint64_t{50} << 30U;
  std::filesystem::path registry = "/usr/bin/docker-registry";
  std::uint16_t port = 0;  // ignored (a warning): the registry listens on a unix socket
};

}  // namespace garm_edge::agent
