#include "agent/base/retired_files.hpp"

#include <algorithm>
#include <filesystem>

namespace garm_edge::agent {

void RetiredFiles::retire(const std::string& path, std::int64_t now) {
  if (std::find(paths.begin(), paths.end(), path) == paths.end()) {
    paths.push_back(path);
  }
  retired_at[path] = now;
}

void RetiredFiles::forget(const std::string& path) {
  std::erase(paths, path);
  retired_at.erase(path);
}

std::vector<std::string> RetiredFiles::collect(
    std::int64_t now, std::chrono::seconds grace,
    const std::function<bool(const std::string& path)>& in_use) {
  std::vector<std::string> removed;
  std::erase_if(paths, [&](const std::string& path) {
    const auto since = retired_at.find(path);
    if ((since != retired_at.end() && now - since->second < grace.count()) || in_use(path)) {
      return false;
    }
    std::error_code ec;
    std::filesystem::remove(path, ec);
    if (ec) {
      return false;
    }
    retired_at.erase(path);
    removed.push_back(path);
    return true;
  });
  return removed;
}

}  // namespace garm_edge::agent
