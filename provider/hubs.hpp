#pragma once

#include <chrono>
#include <stdexcept>

#include "provider/agent_client.hpp"
#include "provider/provider_config.hpp"

namespace garm_edge::provider {

/// A hub that did not give its list of agents.
class HubError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// `config` with every agent enrolled at its [[hubs]] appended (asked of all hubs at once,
/// before `deadline`), each reached through its hub. An agent whose name an [[agents]] entry
/// or an earlier hub already uses is left out. Throws HubError naming a hub that did not
/// answer: without its list, garm would take that hub's runners for gone ones.
ProviderConfig with_hub_agents(ProviderConfig config, TlsConfigCache& tls,
                               std::chrono::steady_clock::time_point deadline);

/// The provider config with its hubs' agents (load_provider_config, then with_hub_agents
/// under the probe deadline when there are hubs).
ProviderConfig load_fleet_config(const std::filesystem::path& path);

/// The hub's answer to /v1/agents as endpoints (for tests and the status command).
std::vector<AgentEndpoint> hub_agents_from_json(const HubEndpoint& hub, const std::string& body);

}  // namespace garm_edge::provider
