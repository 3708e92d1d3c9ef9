#pragma once

// What the section readers of agent.toml share (agent/base only).

#include <string>
#include <string_view>

#include <toml++/toml.h>

#include "agent/base/config.hpp"
#include "common/text.hpp"
#include "common/toml_reader.hpp"
#include "wire/enums.hpp"

namespace garm_edge::agent {

/// `key`'s value as an enum of the wire (os_type, arch), or `fallback` when it is absent.
template <class Enum>
Enum enum_or_fail(TomlTableReader& in, std::string_view key, Enum fallback) {
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

/// [api] and [[api.clients]] (agent/base/api_config.cpp).
void read_api_section(TomlTableReader& root, AgentConfig& config);

/// [pull] and [[images]] (agent/base/image_config.cpp).
void read_pull_section(TomlTableReader& root, AgentConfig& config);
ImageConfig read_image(const toml::table& table, const std::string& source, std::size_t index);

/// [guests] and [[warm]] (agent/base/guest_config.cpp).
void read_guests_section(TomlTableReader& root, AgentConfig& config);
WarmConfig read_warm(const toml::table& table, const std::string& source, std::size_t index,
                     const ApiConfig& api);
/// Each [[warm]] names a configured image and flavor, and warm guests need the guest service.
void check_warm(TomlTableReader& root, const AgentConfig& config);

/// Whose `owned` (warm guests, a cache) an entry makes: its `controller`, which an agent
/// serving more than one controller must name (what was prepared for one must never reach
/// another), else the one controller [[api.clients]] name.
std::string read_owner_controller(TomlTableReader& in, const ApiConfig& api,
                                  std::string_view owned);

/// [mirror]: checked here, started by the daemon (agent/mirror).
void read_mirror_section(TomlTableReader& root, AgentConfig& config);

CacheConfig read_cache(const toml::table& table, const std::string& source, std::size_t index,
                       const ApiConfig& api);
/// Each [[caches]] entry names configured images and a refresh script there is, and needs the
/// guest service (guests mount it from their seed).
void check_caches(TomlTableReader& root, AgentConfig& config);

/// [extra_specs], [[scratch_pools]] and [[networks]] (agent/base/shape_config.cpp).
void read_extra_specs_section(TomlTableReader& root, AgentConfig& config);
ScratchPoolConfig read_scratch_pool(const toml::table& table, const std::string& source,
                                    std::size_t index, const ApiConfig& api);
NetworkConfig read_network(const toml::table& table, const std::string& source, std::size_t index,
                           const ApiConfig& api);
/// [[networks]] need the guests' own network ([libvirt] network).
void check_networks(TomlTableReader& root, const AgentConfig& config);

/// [[quotas]] and [headroom] (agent/base/share_config.cpp).
QuotaConfig read_quota(const toml::table& table, const std::string& source, std::size_t index);
void read_headroom_section(TomlTableReader& root, SharesConfig& shares);

}  // namespace garm_edge::agent
