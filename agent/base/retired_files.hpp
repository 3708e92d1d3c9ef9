#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace garm_edge::agent {

/// Replaced versions of a file (image bases, cache generations): swapped out for new creates,
/// kept on disk while guests' overlays back onto them, removed after. One rule for both.
struct RetiredFiles {
  std::vector<std::string> paths;
  std::map<std::string, std::int64_t> retired_at;  // unix seconds, by path

  void retire(const std::string& path, std::int64_t now);
  /// `path` is current again (or gone): never removed as retired.
  void forget(const std::string& path);
  /// Removes each file retired at least `grace` ago (a create may have planned onto it just
  /// before the swap and still wait at the gate) that `in_use` says no overlay backs onto.
  /// Returns the removed paths; a file that cannot be removed stays listed.
  std::vector<std::string> collect(std::int64_t now, std::chrono::seconds grace,
                                   const std::function<bool(const std::string& path)>& in_use);
};

}  // namespace garm_edge::agent
