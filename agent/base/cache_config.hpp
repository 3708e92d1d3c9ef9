#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace garm_edge::agent {

/// How a cache's generations are made (docs/caches.md): the operator's script, run as root in
/// a builder guest of `image` against a writable copy of the last generation.
struct CacheRefreshConfig {
  std::filesystem::path script;
  std::string image;   // the builder's image; default: the cache's first image, else the first
  std::string flavor;  // the builder's flavor; default: the first configured
  std::chrono::seconds every{std::chrono::hours(24)};  // 0: only when asked
  std::chrono::seconds timeout{std::chrono::hours(1)};
};

/// A disk of prepared content every guest it serves gets as a copy-on-write overlay, mounted at
/// `mount` before the runner starts; the job's writes go with the guest (docs/caches.md).
struct CacheConfig {
  std::string name;  // [a-z0-9-], 1-24 characters: part of disk serials and file names
  std::uint64_t size_gib = 20;
  std::string mount;  // the absolute guest path
  std::string filesystem = "ext4";
  /// The garm controller whose guests alone get it: a cache one controller's script filled
  /// never reaches another's jobs.
  std::string controller;
  std::vector<std::string> images;  // guests of these images get it
  std::vector<std::string> pools;   // and guests of these garm pools (IDs)
  CacheRefreshConfig refresh;

  /// Does a guest of `controller`, `image` and `pool_id` get this cache? `requested` holds the
  /// caches its pool asks for by name in its extra specs.
  bool serves(std::string_view controller, std::string_view image, std::string_view pool_id,
              const std::vector<std::string>& requested) const;
};

/// The most caches one guest gets: each is a virtio disk.
inline constexpr std::size_t kMaxCachesPerGuest = 8;
/// The most a refresh script may be: it travels in the builder's user-data.
inline constexpr std::uintmax_t kMaxRefreshScriptBytes = 64 * 1024;

/// Is `name` a cache name (also the checked form of a pool's extra-specs request)?
bool is_cache_name(std::string_view name);
/// Is `path` a guest path a cache may be mounted at? Absolute, plain characters, no "..".
bool is_cache_mount(std::string_view path);

}  // namespace garm_edge::agent
