#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace garm_edge::agent {

/// The controller cache builders are made under ("garm-edge-cache" in hex): no garm's, so no
/// garm client reaches them and no garm URL or token is ever given to them.
inline constexpr std::string_view kCacheBuilderControllerId =
    "6761726d-6564-6765-6361-636865000000";

/// One generation of a cache: a qcow2 file guests' overlays back onto, never written again.
struct CacheGeneration {
  std::string cache;
  std::uint64_t number = 0;
  std::string path;
};

/// Where one cache stands, as the control API tells its controller's clients.
struct CacheStatus {
  std::string name;
  std::string controller;
  std::uint64_t generation = 0;  // 0: none yet
  std::string made_at;           // of the current generation, RFC 3339
  bool refreshing = false;
  std::string error;  // why the last refresh failed; empty when it did not
};

/// The caches as the instance service and the control API see them (agent/caches implements
/// it).
class CacheGenerations {
 public:
  virtual ~CacheGenerations() = default;
  /// The generation new guests get; nothing while the cache has none.
  virtual std::optional<CacheGeneration> current(const std::string& cache) const = 0;
  /// Removes replaced generations no overlay backs onto; `in_use` says which do.
  virtual void remove_unused(const std::function<bool(const std::string& path)>& in_use) = 0;
  virtual std::vector<CacheStatus> statuses() const = 0;
  /// Starts a refresh of `cache` now, in the background; false when one is under way already.
  virtual bool refresh(const std::string& cache) = 0;
};

}  // namespace garm_edge::agent
