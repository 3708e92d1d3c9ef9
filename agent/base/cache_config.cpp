// [[caches]] in agent.toml (docs/caches.md).
#include "agent/base/cache_config.hpp"

#include <algorithm>
#include <filesystem>

#include "agent/base/config_sections.hpp"
#include "common/text.hpp"
#include "wire/validate.hpp"

namespace garm_edge::agent {
namespace {

constexpr std::size_t kMaxCacheNameLength = 24;

bool is_plain_path_character(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == '-' || c == '/';
}

bool contains(const std::vector<std::string>& items, std::string_view wanted) {
  return std::find(items.begin(), items.end(), wanted) != items.end();
}

void read_refresh(TomlTableReader& in, CacheConfig& cache) {
  auto& refresh = cache.refresh;
  refresh.script = in.absolute_path("refresh_script", true);
  refresh.image = in.string("refresh_image").value_or("");
  refresh.flavor = in.string("refresh_flavor").value_or("");
  refresh.every = std::chrono::hours(
      in.integer<long>("refresh_every_hours", 0, 8760)
          .value_or(std::chrono::duration_cast<std::chrono::hours>(refresh.every).count()));
  refresh.timeout = std::chrono::minutes(
      in.integer<long>("refresh_timeout_minutes", 1, 1440)
          .value_or(std::chrono::duration_cast<std::chrono::minutes>(refresh.timeout).count()));
}

/// The refresh script must be there and small when the agent starts, not at 3 a.m.
void check_refresh_script(TomlTableReader& root, const CacheConfig& cache) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(cache.refresh.script, ec);
  if (ec) {
    root.fail(nullptr, "[[caches]] " + cache.name + ": refresh_script " +
                           cache.refresh.script.string() + " cannot be read: " + ec.message());
  }
  if (size > kMaxRefreshScriptBytes) {
    root.fail(nullptr, "[[caches]] " + cache.name + ": refresh_script " +
                           cache.refresh.script.string() + " is larger than 64 KiB");
  }
}

void check_cache_images(TomlTableReader& root, AgentConfig& config, CacheConfig& cache) {
  for (const auto& image : cache.images) {
    if (config.find_image(image) == nullptr) {
      root.fail(nullptr, "[[caches]] " + cache.name + ": image \"" + printable_excerpt(image) +
                             "\" is not configured in [[images]]");
    }
  }
  auto& refresh = cache.refresh;
  if (refresh.image.empty()) {
    refresh.image = cache.images.empty() ? config.images.front().name : cache.images.front();
  }
  if (refresh.flavor.empty()) {
    refresh.flavor = config.flavors.front().name;
  }
  const auto* builder = config.find_image(refresh.image);
  if (builder == nullptr || config.find_flavor(refresh.flavor) == nullptr) {
    root.fail(nullptr, "[[caches]] " + cache.name +
                           ": refresh_image and refresh_flavor must be configured in [[images]] "
                           "and [[flavors]]");
  }
  if (builder->os_type != wire::OsType::linux) {
    root.fail(nullptr, "[[caches]] " + cache.name + ": the builder of a cache is a Linux guest");
  }
}

}  // namespace

bool is_cache_name(std::string_view name) {
  return !name.empty() && name.size() <= kMaxCacheNameLength && name.front() != '-' &&
         std::all_of(name.begin(), name.end(), [](char c) {
           return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
         });
}

bool is_cache_mount(std::string_view path) {
  if (path.size() < 2 || path.size() > 200 || path.front() != '/' || path.back() == '/' ||
      !std::all_of(path.begin(), path.end(), is_plain_path_character)) {
    return false;
  }
  std::size_t start = 1;
  while (start <= path.size()) {
    const auto end = std::min(path.find('/', start), path.size());
    const auto part = path.substr(start, end - start);
    if (part.empty() || part == "." || part == "..") {
      return false;
    }
    start = end + 1;
  }
  return true;
}

bool CacheConfig::serves(std::string_view controller_id, std::string_view image,
                         std::string_view pool_id,
                         const std::vector<std::string>& requested) const {
  return controller_id == controller &&
         (contains(images, image) || contains(pools, pool_id) || contains(requested, name));
}

CacheConfig read_cache(const toml::table& table, const std::string& source, std::size_t index,
                       const ApiConfig& api) {
  TomlTableReader in(table, source, "[[caches]] #" + std::to_string(index + 1));
  CacheConfig cache;
  cache.name = in.required_string("name");
  if (!is_cache_name(cache.name)) {
    in.fail(in.node("name"), "name must be 1-24 of a-z, 0-9 and '-', not starting with '-'");
  }
  cache.size_gib = in.integer<std::uint64_t>("size_gib", 1, 65536).value_or(cache.size_gib);
  cache.mount = in.required_string("mount");
  if (!is_cache_mount(cache.mount) || cache.mount == "/proc" || cache.mount == "/sys") {
    in.fail(in.node("mount"),
            "mount must be an absolute guest path of letters, digits, '.', '_', '-' and '/', "
            "without '..' (and not / itself)");
  }
  cache.filesystem = in.string("filesystem").value_or(cache.filesystem);
  if (cache.filesystem != "ext4" && cache.filesystem != "xfs") {
    in.fail(in.node("filesystem"), "filesystem must be \"ext4\" or \"xfs\"");
  }
  cache.controller = read_owner_controller(in, api, "the cache's generations");
  cache.images = in.string_list("images");
  cache.pools = in.string_list("pools");
  for (const auto& pool : cache.pools) {
    if (pool.empty() || pool.size() > 128) {
      in.fail(in.node("pools"), "pools must be garm pool IDs");
    }
  }
  read_refresh(in, cache);
  in.reject_unknown_keys();
  return cache;
}

void check_caches(TomlTableReader& root, AgentConfig& config) {
  for (auto& cache : config.caches) {
    check_cache_images(root, config, cache);
    check_refresh_script(root, cache);
    if (!config.guests.enabled) {
      root.fail(nullptr, "[[caches]] needs [guests]: guests mount their caches from their seed");
    }
  }
  if (!config.caches.empty() && config.cache_directory() == config.state_dir) {
    root.fail(nullptr, "[agent] caches_dir must not be the state directory");
  }
}

}  // namespace garm_edge::agent
