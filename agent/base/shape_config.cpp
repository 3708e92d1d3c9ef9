// [extra_specs], [[scratch_pools]] and [[networks]] in agent.toml: what pools may ask for
// beyond their flavor (docs/extra-specs.md).
#include "agent/base/shape_config.hpp"

#include <algorithm>
#include <set>

#include "agent/base/config_sections.hpp"
#include "common/text.hpp"
#include "wire/pool_shape.hpp"
#include "wire/validate.hpp"

namespace garm_edge::agent {
namespace {

ControllerScope read_scope(TomlTableReader& in, const ApiConfig& api, const std::string& entry) {
  ControllerScope scope;
  for (auto controller : in.string_list("controllers")) {
    controller = ascii_lower(controller);
    if (!wire::is_uuid(controller)) {
      in.fail(in.node("controllers"), "controllers: each entry must be a garm controller's UUID");
    }
    if (api.enabled && !api.has_client_for(controller)) {
      in.fail(in.node("controllers"), entry + ": controller " + controller +
                                          " is not one any [[api.clients]] entry may act for");
    }
    scope.controllers.push_back(controller);
  }
  return scope;
}

std::string read_shape_name(TomlTableReader& in) {
  auto name = in.required_string("name");
  if (!wire::is_shape_name(name)) {
    in.fail(in.node("name"), "name must be 1 to 24 of a-z, 0-9 and '-' (not starting with '-')");
  }
  return name;
}

}  // namespace

bool ControllerScope::serves(std::string_view controller) const {
  return controllers.empty() ||
         std::find(controllers.begin(), controllers.end(), controller) != controllers.end();
}

void read_extra_specs_section(TomlTableReader& root, AgentConfig& config) {
  const auto* table = root.table("extra_specs");
  if (table == nullptr) {
    return;
  }
  TomlTableReader in(*table, root.source(), "[extra_specs]");
  auto& limits = config.extra_specs;
  limits.max_root_disk_gib = in.integer<std::uint64_t>("max_root_disk_gib", 0,
                                                       static_cast<std::int64_t>(wire::kMaxDiskGib))
                                 .value_or(limits.max_root_disk_gib);
  limits.nested_virtualization =
      in.boolean("nested_virtualization").value_or(limits.nested_virtualization);
  in.reject_unknown_keys();
}

ScratchPoolConfig read_scratch_pool(const toml::table& table, const std::string& source,
                                    std::size_t index, const ApiConfig& api) {
  TomlTableReader in(table, source, "[[scratch_pools]] #" + std::to_string(index + 1));
  ScratchPoolConfig pool;
  pool.name = read_shape_name(in);
  pool.storage_pool = in.required_string("storage_pool");
  pool.max_disk_gib =
      in.integer<std::uint64_t>("max_disk_gib", 1, static_cast<std::int64_t>(wire::kMaxDiskGib))
          .value_or(pool.max_disk_gib);
  pool.scope = read_scope(in, api, "[[scratch_pools]] " + pool.name);
  in.reject_unknown_keys();
  return pool;
}

NetworkConfig read_network(const toml::table& table, const std::string& source, std::size_t index,
                           const ApiConfig& api) {
  TomlTableReader in(table, source, "[[networks]] #" + std::to_string(index + 1));
  NetworkConfig network;
  network.name = read_shape_name(in);
  network.network = in.string("network").value_or("");
  network.bridge = in.string("bridge").value_or("");
  if (network.network.empty() == network.bridge.empty()) {
    in.fail(nullptr, "[[networks]] " + network.name +
                         " needs exactly one of network (a libvirt network) or bridge");
  }
  for (const auto& value : {network.network, network.bridge}) {
    if (!value.empty() && (!is_plain_text(value) || value.size() > 64 ||
                           value.find_first_of("/ ") != std::string::npos)) {
      in.fail(nullptr, "[[networks]] " + network.name +
                           ": network and bridge are names of at most 64 characters");
    }
  }
  network.scope = read_scope(in, api, "[[networks]] " + network.name);
  in.reject_unknown_keys();
  return network;
}

void check_networks(TomlTableReader& root, const AgentConfig& config) {
  if (!config.networks.empty() && config.network.empty()) {
    root.fail(nullptr, "[[networks]] are further NICs besides [libvirt] network: set it");
  }
  for (const auto& network : config.networks) {
    // A second NIC on the guests' own network would carry no anti-spoofing filter: a guest
    // could send from another guest's address there.
    if (network.network == config.network) {
      root.fail(nullptr, "[[networks]] " + network.name + " names the guests' own network " +
                             config.network +
                             " ([libvirt] network): a further NIC there would not be "
                             "filtered against spoofing; give it another network");
    }
  }
}

}  // namespace garm_edge::agent
