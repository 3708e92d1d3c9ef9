#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

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

/// The caches' generations as the instance service sees them (agent/caches implements it).
class CacheGenerations {
 public:
  virtual ~CacheGenerations() = default;
  /// The generation new guests get; nothing while the cache has none.
  virtual std::optional<CacheGeneration> current(const std::string& cache) const = 0;
  /// Removes replaced generations no overlay backs onto; `in_use` says which do.
  virtual void remove_unused(const std::function<bool(const std::string& path)>& in_use) = 0;
};

}  // namespace garm_edge::agent
