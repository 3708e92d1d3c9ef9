#include "agent/images/image_files.hpp"

#include <algorithm>

#include "common/hex.hpp"

namespace garm_edge::agent {
namespace fs = std::filesystem;

bool is_image_file_of(std::string_view file, const std::string& image,
                      std::initializer_list<std::string_view> suffixes) {
  const auto stem = std::string(kImageFilePrefix) + image + "-";
  if (!file.starts_with(stem) || file.size() < stem.size() + 16) {
    return false;
  }
  if (!is_lower_hex(file.substr(stem.size(), 16), 16)) {
    return false;
  }
  const auto rest = file.substr(stem.size() + 16);
  return std::any_of(suffixes.begin(), suffixes.end(),
                     [&](std::string_view suffix) { return rest == suffix; });
}

std::uint64_t bytes_under(const fs::path& directory, std::string_view prefix) {
  std::uint64_t total = 0;
  std::error_code ec;
  for (fs::directory_iterator it(directory, ec), end; !ec && it != end; it.increment(ec)) {
    const auto name = it->path().filename().string();
    if ((name.starts_with(prefix) || name.starts_with("." + std::string(prefix))) &&
        it->is_regular_file(ec)) {
      total += it->file_size(ec);
    }
  }
  return total;
}

std::string mib(std::uint64_t bytes) {
  return std::to_string(bytes >> 20U) + " MiB";
}

std::string shown_url(const std::string& url) {
  return url.substr(0, url.find_first_of("?#"));
}

}  // namespace garm_edge::agent
