#include "agent/base/config.hpp"

#include <algorithm>
#include <set>
#include <unistd.h>

#include <toml++/toml.h>

#include "agent/base/config_sections.hpp"
#include "common/toml_reader.hpp"
#include "hypervisor/guest_arch.hpp"
#include "wire/error.hpp"
#include "wire/validate.hpp"

namespace garm_edge::agent {
namespace {

using TableReader = TomlTableReader;

std::string default_agent_id() {
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0 || host[0] == '\0') {
    return "garm-edge-agent";
  }
  return host;
}

void read_agent_section(TableReader& root, AgentConfig& config) {
  const auto* table = root.table("agent");
  if (table == nullptr) {
    return;
  }
  TableReader in(*table, root.source(), "[agent]");
  config.agent_id = in.string("id").value_or(config.agent_id);
  if (auto dir = in.string("state_dir")) {
    config.state_dir = *dir;
    if (!config.state_dir.is_absolute()) {
      in.fail(in.node("state_dir"), "state_dir must be an absolute path");
    }
  }
  config.caches_dir = in.absolute_path("caches_dir", false);
  config.max_concurrent_creates = in.integer<std::size_t>("max_concurrent_creates", 1, 1024)
                                      .value_or(config.max_concurrent_creates);
  config.reconcile_interval =
      std::chrono::seconds(in.integer<long>("reconcile_interval_seconds", 5, 86400)
                               .value_or(config.reconcile_interval.count()));
  config.stop_grace = std::chrono::seconds(
      in.integer<long>("stop_grace_seconds", 0, 3600).value_or(config.stop_grace.count()));
  config.draining = in.boolean("draining").value_or(config.draining);
  config.replaced_grace = std::chrono::seconds(
      in.integer<long>("replaced_grace_seconds", 0, 86400).value_or(config.replaced_grace.count()));
  config.startup_timeout =
      std::chrono::seconds(in.integer<long>("startup_timeout_seconds", 60, 86400)
                               .value_or(config.startup_timeout.count()));
  try {
    wire::validate_instance_name(config.agent_id, "id");
  } catch (const wire::WireError& e) {
    in.fail(in.node("id"), e.what());
  }
  in.reject_unknown_keys();
}

void read_capacity_section(TableReader& root, AgentConfig& config) {
  const auto* table = root.table("capacity");
  if (table == nullptr) {
    return;
  }
  TableReader in(*table, root.source(), "[capacity]");
  auto& capacity = config.capacity;
  capacity.cpu_overcommit =
      in.number("cpu_overcommit", 0.1, 1000).value_or(capacity.cpu_overcommit);
  capacity.memory_overcommit =
      in.number("memory_overcommit", 0.1, 1000).value_or(capacity.memory_overcommit);
  capacity.reserved_memory_mib = in.integer<std::uint64_t>("reserved_memory_mib", 0, 1U << 30U)
                                     .value_or(capacity.reserved_memory_mib);
  capacity.max_instances =
      in.integer<std::size_t>("max_instances", 0, 100000).value_or(capacity.max_instances);
  capacity.disk_gib =
      in.integer<std::uint64_t>("disk_gib", 0, std::int64_t{1} << 30).value_or(capacity.disk_gib);
  capacity.max_saved_gib = in.integer<std::uint64_t>("max_saved_gib", 0, std::int64_t{1} << 30)
                               .value_or(capacity.max_saved_gib);
  in.reject_unknown_keys();
}

void read_libvirt_section(TableReader& root, AgentConfig& config) {
  const auto* table = root.table("libvirt");
  if (table == nullptr) {
    return;
  }
  TableReader in(*table, root.source(), "[libvirt]");
  config.libvirt.uri = in.string("uri").value_or(config.libvirt.uri);
  if (auto type = in.string("virt_type"); type && *type != "auto") {
    config.libvirt.virt_type = hypervisor::parse_virt_type(*type);
    if (!config.libvirt.virt_type) {
      in.fail(in.node("virt_type"), "virt_type must be one of auto, kvm, qemu, test");
    }
  }
  config.libvirt.call_timeout = std::chrono::seconds(
      in.integer<long>("call_timeout_seconds", 1, 3600)
          .value_or(std::chrono::duration_cast<std::chrono::seconds>(config.libvirt.call_timeout)
                        .count()));
  config.libvirt.workers =
      in.integer<std::size_t>("workers", 1, 64).value_or(config.libvirt.workers);
  config.storage_pool = in.string("storage_pool").value_or(config.storage_pool);
  config.network = in.string("network").value_or(config.network);
  in.reject_unknown_keys();
}

FlavorConfig read_flavor(const toml::table& table, const std::string& source, std::size_t index) {
  TableReader in(table, source, "[[flavors]] #" + std::to_string(index + 1));
  FlavorConfig flavor;
  flavor.name = in.required_string("name");
  flavor.vcpus = in.integer<unsigned>("vcpus", 1, 512).value_or(flavor.vcpus);
  flavor.memory_mib =
      in.integer<std::uint64_t>("memory_mib", 64, 4 * 1024 * 1024).value_or(flavor.memory_mib);
  flavor.disk_gib = in.integer<std::uint64_t>("disk_gib", 1, 64 * 1024).value_or(flavor.disk_gib);
  try {
    wire::validate_resource_name(flavor.name, "name");
  } catch (const wire::WireError& e) {
    in.fail(in.node("name"), e.what());
  }
  in.reject_unknown_keys();
  return flavor;
}

template <class Item, class Read>
std::vector<Item> read_list(TableReader& root, std::string_view key, Read read) {
  std::vector<Item> items;
  const auto* array = root.array_of_tables(key);
  if (array == nullptr) {
    return items;
  }
  std::set<std::string> names;
  for (std::size_t i = 0; i < array->size(); ++i) {
    items.push_back(read(*array->get(i)->as_table(), root.source(), i));
    if (!names.insert(items.back().name).second) {
      root.fail(array->get(i),
                std::string(key) + ": \"" + items.back().name + "\" is defined twice");
    }
  }
  return items;
}

}  // namespace

const ImageConfig* AgentConfig::find_image(std::string_view name) const {
  for (const auto& image : images) {
    if (image.name == name) {
      return &image;
    }
  }
  return nullptr;
}

const FlavorConfig* AgentConfig::find_flavor(std::string_view name) const {
  for (const auto& flavor : flavors) {
    if (flavor.name == name) {
      return &flavor;
    }
  }
  return nullptr;
}

const ScratchPoolConfig* AgentConfig::find_scratch_pool(std::string_view name) const {
  const auto found = std::find_if(scratch_pools.begin(), scratch_pools.end(),
                                  [&](const ScratchPoolConfig& pool) { return pool.name == name; });
  return found == scratch_pools.end() ? nullptr : &*found;
}

const NetworkConfig* AgentConfig::find_network(std::string_view name) const {
  const auto found = std::find_if(networks.begin(), networks.end(),
                                  [&](const NetworkConfig& entry) { return entry.name == name; });
  return found == networks.end() ? nullptr : &*found;
}

const CacheConfig* AgentConfig::find_cache(std::string_view name) const {
  const auto found = std::find_if(caches.begin(), caches.end(),
                                  [&](const CacheConfig& cache) { return cache.name == name; });
  return found == caches.end() ? nullptr : &*found;
}

namespace {

/// "/var/lib/garm-edge" -> "/var/lib/garm-edge-<suffix>": beside the state directory, which
/// is private (0700) while QEMU or other processes open what is kept here.
std::filesystem::path beside_state_dir(const std::filesystem::path& state_dir,
                                       std::string_view suffix) {
  const auto state = state_dir.lexically_normal();
  const auto name = state.has_filename() ? state.filename() : state.parent_path().filename();
  return state.parent_path() / (name.string() + "-" + std::string(suffix));
}

void read_quotas(TableReader& root, SharesConfig& shares) {
  const auto* array = root.array_of_tables("quotas");
  for (std::size_t i = 0; array != nullptr && i < array->size(); ++i) {
    shares.quotas.push_back(read_quota(*array->get(i)->as_table(), root.source(), i));
    if (shares.find(shares.quotas.back().controller) != &shares.quotas.back()) {
      root.fail(array->get(i),
                "[[quotas]] names controller " + shares.quotas.back().controller + " twice");
    }
  }
}

}  // namespace

std::filesystem::path AgentConfig::cache_directory() const {
  return caches_dir.empty() ? beside_state_dir(state_dir, "caches") : caches_dir;
}

std::filesystem::path AgentConfig::mirror_directory() const {
  return mirror.directory.empty() ? beside_state_dir(state_dir, "mirror") : mirror.directory;
}

AgentConfig parse_agent_config(std::string_view toml_text, const std::string& source_name) {
  const auto document = parse_toml_document(toml_text, source_name);
  AgentConfig config;
  config.agent_id = default_agent_id();
  TableReader root(document, source_name, "top level");
  read_agent_section(root, config);
  read_capacity_section(root, config);
  read_libvirt_section(root, config);
  read_api_section(root, config);
  read_guests_section(root, config);
  read_pull_section(root, config);
  config.images = read_list<ImageConfig>(root, "images", read_image);
  config.flavors = read_list<FlavorConfig>(root, "flavors", read_flavor);
  config.warm = read_list<WarmConfig>(
      root, "warm",
      [&api = config.api](const toml::table& table, const std::string& source, std::size_t index) {
        return read_warm(table, source, index, api);
      });
  read_mirror_section(root, config);
  config.caches = read_list<CacheConfig>(
      root, "caches",
      [&api = config.api](const toml::table& table, const std::string& source, std::size_t index) {
        return read_cache(table, source, index, api);
      });
  read_extra_specs_section(root, config);
  const auto read_with_api = [&api = config.api](auto read) {
    return [&api, read](const toml::table& table, const std::string& source, std::size_t index) {
      return read(table, source, index, api);
    };
  };
  config.scratch_pools =
      read_list<ScratchPoolConfig>(root, "scratch_pools", read_with_api(read_scratch_pool));
  config.networks = read_list<NetworkConfig>(root, "networks", read_with_api(read_network));
  read_quotas(root, config.shares);
  read_headroom_section(root, config.shares);
  root.reject_unknown_keys();
  if (config.images.empty() || config.flavors.empty()) {
    root.fail(nullptr, "at least one [[images]] and one [[flavors]] entry are required");
  }
  check_warm(root, config);
  check_caches(root, config);
  check_networks(root, config);
  return config;
}

AgentConfig load_agent_config(const std::filesystem::path& path) {
  return parse_agent_config(read_config_file(path, "config file"), path.string());
}

}  // namespace garm_edge::agent
