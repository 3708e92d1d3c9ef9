#include "agent/base/config.hpp"

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>
#include <unistd.h>

#include <toml++/toml.h>

#include "agent/base/config_sections.hpp"
#include "common/hex.hpp"
#include "common/text.hpp"
#include "common/toml_reader.hpp"
#include "hypervisor/guest_arch.hpp"
#include "wire/error.hpp"
#include "wire/validate.hpp"

namespace garm_edge::agent {
namespace {

using TableReader = TomlTableReader;

template <class Enum>
Enum enum_or_fail(TableReader& in, std::string_view key, Enum fallback) {
  const auto text = in.string(key);
  if (!text) {
    return fallback;
  }
  const auto parsed = wire::parse_enum<Enum>(*text);
  if (!parsed) {
    in.fail(in.node(key),
            std::string(key) + " has unknown value \"" + printable_excerpt(*text) + "\"");
  }
  return *parsed;
}

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

ApiClient read_api_client(const toml::table& table, const std::string& source, std::size_t index) {
  TableReader in(table, source, "[[api.clients]] #" + std::to_string(index + 1));
  ApiClient client;
  client.identity = in.required_string("identity");
  const auto* list = in.node("controllers");
  if (list == nullptr || !list->is_array() || list->as_array()->empty()) {
    in.fail(list, "controllers must be a non-empty list of controller UUIDs (or [\"*\"])");
  }
  for (const auto& item : *list->as_array()) {
    const auto id = item.value<std::string>();
    if (!id || (*id != "*" && !wire::is_uuid(*id))) {
      in.fail(&item, "controllers: each entry must be a UUID or \"*\"");
    }
    client.controllers.push_back(ascii_lower(*id));  // garm's IDs are lower case
  }
  in.reject_unknown_keys();
  return client;
}

std::vector<net::AddressRange> read_allowed_ranges(TableReader& in) {
  std::vector<net::AddressRange> ranges;
  const auto* list = in.node("allow");
  if (list == nullptr) {
    return ranges;
  }
  if (!list->is_array() || list->as_array()->empty()) {
    in.fail(list, "allow must be a non-empty list of addresses or CIDR ranges (or left out)");
  }
  for (const auto& item : *list->as_array()) {
    const auto text = item.value<std::string>();
    try {
      ranges.push_back(net::AddressRange::parse(text.value_or("")));
    } catch (const std::invalid_argument& e) {
      in.fail(&item, std::string("allow: ") + e.what());
    }
  }
  return ranges;
}

void read_api_section(TableReader& root, AgentConfig& config) {
  const auto* table = root.table("api");
  if (table == nullptr) {
    return;
  }
  TableReader in(*table, root.source(), "[api]");
  auto& api = config.api;
  api.enabled = true;
  api.address = in.string("address").value_or(api.address);
  api.port = in.integer<std::uint16_t>("port", 0, 65535).value_or(api.port);  // 0: any free port
  api.ca = in.absolute_path("ca", true);
  api.crl = in.absolute_path("crl", false);
  api.certificate = in.absolute_path("certificate", true);
  api.key = in.absolute_path("key", true);
  api.max_connections =
      in.integer<std::size_t>("max_connections", 1, 65536).value_or(api.max_connections);
  api.workers = in.integer<std::size_t>("workers", 1, 256).value_or(api.workers);
  api.allow = read_allowed_ranges(in);
  if (const auto* clients = in.array_of_tables("clients")) {
    for (std::size_t i = 0; i < clients->size(); ++i) {
      api.clients.push_back(read_api_client(*clients->get(i)->as_table(), root.source(), i));
    }
  }
  if (api.clients.empty()) {
    in.fail(nullptr, "at least one [[api.clients]] entry is required: nobody could use the API");
  }
  in.reject_unknown_keys();
}

AntiSpoofing anti_spoofing_or_fail(TableReader& in) {
  const auto text = in.string("anti_spoofing").value_or("auto");
  if (text == "auto") {
    return AntiSpoofing::automatic;
  }
  if (text == "clean-traffic") {
    return AntiSpoofing::clean_traffic;
  }
  if (text == "source-ip") {
    return AntiSpoofing::source_ip;
  }
  if (text == "off") {
    return AntiSpoofing::off;
  }
  in.fail(in.node("anti_spoofing"),
          "anti_spoofing must be one of auto, clean-traffic, source-ip, off");
}

void read_pull_section(TableReader& root, AgentConfig& config) {
  const auto* table = root.table("pull");
  if (table == nullptr) {
    return;
  }
  TableReader in(*table, root.source(), "[pull]");
  auto& pull = config.pull;
  pull.directory = in.absolute_path("directory", false);
  pull.quota_bytes = in.integer<std::uint64_t>("quota_gib", 0, 1U << 20U).value_or(0) << 30U;
  pull.bytes_per_second = in.integer<std::uint64_t>("rate_mib_per_second", 0, 1U << 20U).value_or(0)
                          << 20U;
  pull.proxies = {.http_proxy = in.string("http_proxy").value_or(""),
                  .https_proxy = in.string("https_proxy").value_or(""),
                  .no_proxy = in.string("no_proxy").value_or("")};
  for (const auto& [key, proxy] : {std::pair{"http_proxy", pull.proxies.http_proxy},
                                   std::pair{"https_proxy", pull.proxies.https_proxy}}) {
    try {
      if (!proxy.empty()) {
        net::proxy_for(net::parse_upstream_url("http://example.invalid"),
                       {.http_proxy = proxy, .https_proxy = "", .no_proxy = ""});
      }
    } catch (const std::exception& e) {
      in.fail(in.node(key), std::string(key) + ": " + e.what());
    }
  }
  pull.ca_bundle = in.absolute_path("ca_bundle", false);
  pull.recheck = std::chrono::hours(in.integer<long>("recheck_hours", 1, 24 * 365).value_or(6));
  pull.timeout =
      std::chrono::minutes(in.integer<long>("timeout_minutes", 1, 24 * 60).value_or(120));
  pull.stall = std::chrono::seconds(in.integer<long>("stall_seconds", 5, 3600).value_or(60));
  in.reject_unknown_keys();
}

void read_guests_section(TableReader& root, AgentConfig& config) {
  const auto* table = root.table("guests");
  if (table == nullptr) {
    return;
  }
  TableReader in(*table, root.source(), "[guests]");
  auto& guests = config.guests;
  guests.enabled = true;
  guests.address = in.string("address").value_or("");
  guests.port = in.integer<std::uint16_t>("port", 0, 65535).value_or(guests.port);
  const auto mode = in.string("mode").value_or("relay");
  if (mode != "relay" && mode != "direct") {
    in.fail(in.node("mode"), "mode must be relay or direct");
  }
  guests.relay = mode == "relay";
  guests.addresses = in.string("addresses").value_or("");
  guests.anti_spoofing = anti_spoofing_or_fail(in);
  guests.relay_timeout = std::chrono::seconds(
      in.integer<long>("relay_timeout_seconds", 1, 600).value_or(guests.relay_timeout.count()));
  guests.max_connections =
      in.integer<std::size_t>("max_connections", 1, 65536).value_or(guests.max_connections);
  guests.address_quarantine =
      std::chrono::seconds(in.integer<long>("address_quarantine_seconds", 0, 86400)
                               .value_or(guests.address_quarantine.count()));
  guests.runner_cache_mib =
      in.integer<std::uint64_t>("runner_cache_mib", 0, 1U << 24U).value_or(guests.runner_cache_mib);
  guests.runner_download_timeout =
      std::chrono::seconds(in.integer<long>("runner_download_timeout_seconds", 10, 7200)
                               .value_or(guests.runner_download_timeout.count()));
  if (config.network.empty()) {
    in.fail(nullptr, "guests need a network: set [libvirt] network");
  }
  in.reject_unknown_keys();
}

void check_pull_url(TableReader& in, std::string_view key, const std::string& url) {
  if (!url.starts_with("https://") && !url.starts_with("http://")) {
    in.fail(in.node(key), std::string(key) + " must be an https:// or http:// URL");
  }
  try {
    net::parse_upstream_url(std::string_view(url).substr(0, url.find_first_of("?#")));
  } catch (const std::exception& e) {
    in.fail(in.node(key), std::string(key) + ": " + e.what());
  }
}

std::optional<ImageSourceConfig> read_image_source(TableReader& in) {
  const auto url = in.string("source");
  const auto sha256 = in.string("sha256");
  const auto checksums = in.string("checksums");
  const auto format = in.string("source_format");
  if (!url) {
    if (sha256 || checksums || format) {
      in.fail(nullptr, "sha256, checksums and source_format belong to a source: set source");
    }
    return std::nullopt;
  }
  ImageSourceConfig source{.url = *url,
                           .sha256 = sha256.value_or(""),
                           .checksums_url = checksums.value_or(""),
                           .format = "qcow2",
                           .xz = false};
  check_pull_url(in, "source", source.url);
  const auto file = source.file_name();
  source.xz = file.ends_with(".xz");
  const auto inner = source.xz ? file.substr(0, file.size() - 3) : file;
  source.format = format.value_or(inner.ends_with(".raw") ? "raw" : "qcow2");
  if (source.format != "qcow2" && source.format != "raw") {
    in.fail(in.node("source_format"), "source_format must be qcow2 or raw");
  }
  if (file.empty()) {
    in.fail(in.node("source"), "source must name a file (a checksum file lists it by name)");
  }
  if (source.sha256.empty() == source.checksums_url.empty()) {
    in.fail(nullptr, "a source needs exactly one of sha256 or checksums (a SHA256SUMS file)");
  }
  if (!source.sha256.empty() && !is_lower_hex(source.sha256, 64)) {
    in.fail(in.node("sha256"), "sha256 must be 64 lower-case hex digits");
  }
  if (!source.checksums_url.empty()) {
    check_pull_url(in, "checksums", source.checksums_url);
    // The digest is what proves the image: over plain HTTP anyone on the path chooses it.
    if (!source.checksums_url.starts_with("https://")) {
      in.fail(in.node("checksums"),
              "checksums must be an https:// URL: over http:// anyone on the path chooses the "
              "digest the image is checked against (or pin sha256 here)");
    }
  }
  return source;
}

ImageConfig read_image(const toml::table& table, const std::string& source, std::size_t index) {
  TableReader in(table, source, "[[images]] #" + std::to_string(index + 1));
  ImageConfig image;
  image.name = in.required_string("name");
  image.base_volume = in.string("base_volume").value_or("");
  image.base_path = in.string("base_path").value_or("");
  image.source = read_image_source(in);
  image.base_format = in.string("base_format").value_or(image.base_format);
  image.os_type = enum_or_fail(in, "os_type", wire::OsType::linux);
  image.os_name = in.string("os_name").value_or("");
  image.os_version = in.string("os_version").value_or("");
  image.arch = enum_or_fail(in, "arch", wire::OsArch::amd64);
  try {
    wire::validate_resource_name(image.name, "name");
  } catch (const wire::WireError& e) {
    in.fail(in.node("name"), e.what());
  }
  if (!image.base_volume.empty() && !image.base_path.empty()) {
    in.fail(nullptr, "image \"" + image.name + "\" has both base_volume and base_path: keep one");
  }
  if (image.base_volume.empty() && image.base_path.empty() && !image.source) {
    in.fail(nullptr, "image \"" + image.name +
                         "\" needs a base_volume, a base_path or a source to pull it from");
  }
  if (!image.base_path.empty() && image.base_path.front() != '/') {
    in.fail(in.node("base_path"), "base_path must be an absolute path");
  }
  if (!image.base_volume.empty() && image.base_volume.find('/') != std::string::npos) {
    in.fail(in.node("base_volume"), "base_volume is a volume name in storage_pool, not a path");
  }
  if (image.base_format != "qcow2" && image.base_format != "raw") {
    in.fail(in.node("base_format"), "base_format must be qcow2 or raw");
  }
  if (image.arch == wire::OsArch::i386) {
    in.fail(in.node("arch"), "arch i386 is not supported; use amd64, arm64 or arm");
  }
  in.reject_unknown_keys();
  return image;
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

WarmConfig read_warm(const toml::table& table, const std::string& source, std::size_t index,
                     const ApiConfig& api) {
  TableReader in(table, source, "[[warm]] #" + std::to_string(index + 1));
  WarmConfig warm;
  warm.controller = read_owner_controller(in, api, "warm guests");
  warm.image = in.required_string("image");
  warm.flavor = in.required_string("flavor");
  warm.count = in.integer<std::size_t>("count", 0, 256).value_or(warm.count);
  warm.ready_timeout = std::chrono::seconds(
      in.integer<long>("ready_timeout_seconds", 30, 86400).value_or(warm.ready_timeout.count()));
  warm.name = warm.image + "/" + warm.flavor + " for " + warm.controller;
  in.reject_unknown_keys();
  return warm;
}

/// Each [[warm]] names a configured image and flavor, and warm guests need the guest service.
void check_warm(TableReader& root, const AgentConfig& config) {
  for (const auto& warm : config.warm) {
    if (config.find_image(warm.image) == nullptr || config.find_flavor(warm.flavor) == nullptr) {
      root.fail(nullptr, "[[warm]] " + warm.name + ": image and flavor must be configured in " +
                             "[[images]] and [[flavors]]");
    }
    if (!config.guests.enabled) {
      root.fail(nullptr, "[[warm]] needs [guests]: warm guests wait for their assignment there");
    }
    if (const auto* image = config.find_image(warm.image);
        image != nullptr && image->os_type != wire::OsType::linux) {
      root.fail(nullptr, "[[warm]] " + warm.name + ": warm guests are Linux guests");
    }
  }
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

std::string read_owner_controller(TomlTableReader& in, const ApiConfig& api,
                                  std::string_view owned) {
  if (auto controller = in.string("controller")) {
    controller = ascii_lower(*controller);  // as garm writes it, and [[api.clients]] are kept
    if (!wire::is_uuid(*controller)) {
      in.fail(in.node("controller"), "controller must be a garm controller's UUID");
    }
    if (api.enabled && !api.has_client_for(*controller)) {
      in.fail(in.node("controller"), "controller " + *controller +
                                         " is not one any [[api.clients]] entry may act for: "
                                         "its " +
                                         std::string(owned) + " would never be used");
    }
    return *controller;
  }
  const auto sole = api.sole_controller();
  if (!sole) {
    in.fail(nullptr,
            "controller is required: [[api.clients]] name more than one controller "
            "(or \"*\", or none), and " +
                std::string(owned) + " belong to exactly one");
  }
  return *sole;
}

bool ApiConfig::knows(const std::vector<std::string>& identities) const {
  return std::any_of(clients.begin(), clients.end(), [&identities](const ApiClient& client) {
    return std::find(identities.begin(), identities.end(), client.identity) != identities.end();
  });
}

bool ApiConfig::allows(const std::vector<std::string>& identities,
                       std::string_view controller_id) const {
  for (const auto& client : clients) {
    if (std::find(identities.begin(), identities.end(), client.identity) == identities.end()) {
      continue;
    }
    for (const auto& allowed : client.controllers) {
      if (allowed == "*" || allowed == controller_id) {
        return true;
      }
    }
  }
  return false;
}

bool ApiConfig::allows_every_controller(const std::vector<std::string>& identities) const {
  return allows(identities, "*");
}

bool ApiConfig::has_client_for(std::string_view controller_id) const {
  return std::any_of(clients.begin(), clients.end(), [controller_id](const ApiClient& client) {
    return std::any_of(client.controllers.begin(), client.controllers.end(),
                       [controller_id](const std::string& allowed) {
                         return allowed == "*" || allowed == controller_id;
                       });
  });
}

std::optional<std::string> ApiConfig::sole_controller() const {
  std::set<std::string> named;
  for (const auto& client : clients) {
    named.insert(client.controllers.begin(), client.controllers.end());
  }
  if (named.size() != 1 || *named.begin() == "*") {
    return std::nullopt;
  }
  return *named.begin();
}

std::string ImageSourceConfig::file_name() const {
  const auto path = std::string_view(url).substr(0, url.find_first_of("?#"));
  const auto slash = path.rfind('/');
  const auto scheme_end = path.find("://");
  if (slash == std::string_view::npos || scheme_end == std::string_view::npos ||
      slash < scheme_end + 3 || path.find('/', scheme_end + 3) == std::string_view::npos) {
    return "";
  }
  return std::string(path.substr(slash + 1));
}

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

std::string agent_config_json_schema() {
  return R"json({"$schema":"http://json-schema.org/draft-07/schema#","title":"garm-edge-agent config (TOML)",)json"
         R"json("type":"object","required":["images","flavors"],"additionalProperties":false,"properties":{)json"
         R"json("agent":{"type":"object","additionalProperties":false,"properties":{"id":{"type":"string"},)json"
         R"json("state_dir":{"type":"string"},"caches_dir":{"type":"string"},"max_concurrent_creates":{"type":"integer","minimum":1,"maximum":1024},)json"
         R"json("reconcile_interval_seconds":{"type":"integer","minimum":5,"maximum":86400},)json"
         R"json("stop_grace_seconds":{"type":"integer","minimum":0,"maximum":3600},"draining":{"type":"boolean"},)json"
         R"json("replaced_grace_seconds":{"type":"integer","minimum":0,"maximum":86400},)json"
         R"json("startup_timeout_seconds":{"type":"integer","minimum":60,"maximum":86400}}},)json"
         R"json("capacity":{"type":"object","additionalProperties":false,"properties":{)json"
         R"json("cpu_overcommit":{"type":"number","minimum":0.1,"maximum":1000},)json"
         R"json("memory_overcommit":{"type":"number","minimum":0.1,"maximum":1000},)json"
         R"json("reserved_memory_mib":{"type":"integer","minimum":0,"maximum":1073741824},)json"
         R"json("max_instances":{"type":"integer","minimum":0,"maximum":100000},)json"
         R"json("disk_gib":{"type":"integer","minimum":0,"maximum":1073741824}}},)json"
         R"json("extra_specs":{"type":"object","additionalProperties":false,"properties":{)json"
         R"json("max_root_disk_gib":{"type":"integer","minimum":0,"maximum":65536},)json"
         R"json("nested_virtualization":{"type":"boolean"}}},)json"
         R"json("scratch_pools":{"type":"array","items":{"type":"object","additionalProperties":false,)json"
         R"json("required":["name","storage_pool"],"properties":{"name":{"type":"string","pattern":"^[a-z0-9][a-z0-9-]{0,23}$"},)json"
         R"json("storage_pool":{"type":"string"},"max_disk_gib":{"type":"integer","minimum":1,"maximum":65536},)json"
         R"json("controllers":{"type":"array","items":{"type":"string"}}}}},)json"
         R"json("networks":{"type":"array","items":{"type":"object","additionalProperties":false,)json"
         R"json("required":["name"],"properties":{"name":{"type":"string","pattern":"^[a-z0-9][a-z0-9-]{0,23}$"},)json"
         R"json("network":{"type":"string"},"bridge":{"type":"string"},)json"
         R"json("controllers":{"type":"array","items":{"type":"string"}}}}},)json"
         R"json("libvirt":{"type":"object","additionalProperties":false,"properties":{"uri":{"type":"string"},)json"
         R"json("virt_type":{"enum":["auto","kvm","qemu","test"]},)json"
         R"json("call_timeout_seconds":{"type":"integer","minimum":1,"maximum":3600},)json"
         R"json("workers":{"type":"integer","minimum":1,"maximum":64},"storage_pool":{"type":"string"},)json"
         R"json("network":{"type":"string"}}},)json"
         R"json("api":{"type":"object","additionalProperties":false,"required":["ca","certificate","key","clients"],)json"
         R"json("properties":{"address":{"type":"string"},"port":{"type":"integer","minimum":0,"maximum":65535},)json"
         R"json("ca":{"type":"string"},"crl":{"type":"string"},"certificate":{"type":"string"},"key":{"type":"string"},)json"
         R"json("max_connections":{"type":"integer","minimum":1,"maximum":65536},"workers":{"type":"integer","minimum":1,"maximum":256},)json"
         R"json("allow":{"type":"array","minItems":1,"items":{"type":"string"}},)json"
         R"json("clients":{"type":"array","minItems":1,"items":{"type":"object","additionalProperties":false,)json"
         R"json("required":["identity","controllers"],"properties":{"identity":{"type":"string"},)json"
         R"json("controllers":{"type":"array","minItems":1,"items":{"type":"string"}}}}}}},)json"
         R"json("guests":{"type":"object","additionalProperties":false,"properties":{"address":{"type":"string"},)json"
         R"json("port":{"type":"integer","minimum":0,"maximum":65535},"mode":{"enum":["relay","direct"]},)json"
         R"json("addresses":{"type":"string"},"anti_spoofing":{"enum":["auto","clean-traffic","source-ip","off"]},)json"
         R"json("relay_timeout_seconds":{"type":"integer","minimum":1,"maximum":600},)json"
         R"json("max_connections":{"type":"integer","minimum":1,"maximum":65536},)json"
         R"json("address_quarantine_seconds":{"type":"integer","minimum":0,"maximum":86400},)json"
         R"json("runner_cache_mib":{"type":"integer","minimum":0,"maximum":16777216},)json"
         R"json("runner_download_timeout_seconds":{"type":"integer","minimum":10,"maximum":7200}}},)json"
         R"json("images":{"type":"array","minItems":1,"items":{"type":"object","additionalProperties":false,)json"
         R"json("required":["name"],"properties":{"name":{"type":"string"},"base_volume":{"type":"string"},)json"
         R"json("base_path":{"type":"string"},"base_format":{"enum":["qcow2","raw"]},)json"
         R"json("source":{"type":"string","pattern":"^https?://"},)json"
         R"json("sha256":{"type":"string","pattern":"^[0-9a-f]{64}$"},)json"
         R"json("checksums":{"type":"string","pattern":"^https://"},)json"
         R"json("source_format":{"enum":["qcow2","raw"]},)json"
         R"json("os_type":{"enum":["linux","windows"]},"os_name":{"type":"string"},"os_version":{"type":"string"},)json"
         R"json("arch":{"enum":["amd64","arm64","arm"]}}}},)json"
         R"json("pull":{"type":"object","additionalProperties":false,"properties":{)json"
         R"json("directory":{"type":"string"},"quota_gib":{"type":"integer","minimum":0,"maximum":1048576},)json"
         R"json("rate_mib_per_second":{"type":"integer","minimum":0,"maximum":1048576},)json"
         R"json("http_proxy":{"type":"string"},"https_proxy":{"type":"string"},)json"
         R"json("no_proxy":{"type":"string"},"ca_bundle":{"type":"string"},)json"
         R"json("recheck_hours":{"type":"integer","minimum":1,"maximum":8760},)json"
         R"json("timeout_minutes":{"type":"integer","minimum":1,"maximum":1440},)json"
         R"json("stall_seconds":{"type":"integer","minimum":5,"maximum":3600}}},)json"
         R"json("flavors":{"type":"array","minItems":1,"items":{"type":"object","additionalProperties":false,)json"
         R"json("required":["name"],"properties":{"name":{"type":"string"},)json"
         R"json("vcpus":{"type":"integer","minimum":1,"maximum":512},)json"
         R"json("memory_mib":{"type":"integer","minimum":64,"maximum":4194304},)json"
         R"json("disk_gib":{"type":"integer","minimum":1,"maximum":65536}}}},)json"
         R"json("warm":{"type":"array","items":{"type":"object","additionalProperties":false,)json"
         R"json("required":["image","flavor"],"properties":{"controller":{"type":"string"},)json"
         R"json("image":{"type":"string"},)json"
         R"json("flavor":{"type":"string"},"count":{"type":"integer","minimum":0,"maximum":256},)json"
         R"json("ready_timeout_seconds":{"type":"integer","minimum":30,"maximum":86400}}}},)json"
         R"json("mirror":{"type":"object","additionalProperties":false,"properties":{)json"
         R"json("upstream":{"type":"string","pattern":"^https?://"},"credentials":{"type":"string"},)json"
         R"json("directory":{"type":"string"},"max_gib":{"type":"integer","minimum":1,"maximum":65536},)json"
         R"json("registry":{"type":"string"},"port":{"type":"integer","minimum":0,"maximum":65535}}},)json"
         R"json("caches":{"type":"array","items":{"type":"object","additionalProperties":false,)json"
         R"json("required":["name","mount","refresh_script"],"properties":{)json"
         R"json("name":{"type":"string","pattern":"^[a-z0-9][a-z0-9-]{0,23}$"},)json"
         R"json("size_gib":{"type":"integer","minimum":1,"maximum":65536},)json"
         R"json("mount":{"type":"string","pattern":"^/[A-Za-z0-9._/-]+$"},)json"
         R"json("filesystem":{"enum":["ext4","xfs"]},"controller":{"type":"string"},)json"
         R"json("images":{"type":"array","items":{"type":"string"}},)json"
         R"json("pools":{"type":"array","items":{"type":"string"}},)json"
         R"json("refresh_script":{"type":"string"},"refresh_image":{"type":"string"},)json"
         R"json("refresh_flavor":{"type":"string"},)json"
         R"json("refresh_every_hours":{"type":"integer","minimum":0,"maximum":8760},)json"
         R"json("refresh_timeout_minutes":{"type":"integer","minimum":1,"maximum":1440}}}}}})json";
}

}  // namespace garm_edge::agent
