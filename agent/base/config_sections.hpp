#pragma once

// What the section readers of agent.toml share (agent/base only).

#include <string>
#include <string_view>

#include <toml++/toml.h>

#include "agent/base/config.hpp"
#include "common/toml_reader.hpp"

namespace garm_edge::agent {

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

}  // namespace garm_edge::agent
