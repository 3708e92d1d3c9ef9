#pragma once

#include <chrono>
#include <stdexcept>

#include "provider/agent_client.hpp"
#include "provider/provider_config.hpp"
#include "wire/relay_framing.hpp"

namespace garm_edge::provider {

/// A hub that did not give its list of agents.
class HubError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A request for every agent of the hubs, asked with the hubs' lists: one round trip gives
/// both (ListInstances). The answers go to `answers`, for AgentClient::prefetched.
struct HubPrefetch {
  std::string method;
  std::string path;
  std::chrono::milliseconds timeout;
  std::vector<wire::RelayedAnswer>* answers;
};

/// `config` with every agent enrolled at its [[hubs]] appended (asked of all hubs at once,
/// before `deadline`), each reached through its hub: for an entry of several hub processes on
/// one database, every process is asked at once and each agent is counted once, reached
/// through a process that has a tunnel to it (the first listing to arrive that shows every
/// agent connected ends the wait; else the first in `urls` order that lists it connected). An agent
/// whose name an [[agents]] entry or an earlier hub already uses is left out. Throws HubError
/// naming a hub none of whose processes answered: without its list, garm would take that hub's
/// runners for gone ones.
ProviderConfig with_hub_agents(ProviderConfig config, TlsConfigCache& tls,
                               std::chrono::steady_clock::time_point deadline,
                               const std::optional<HubPrefetch>& prefetch = std::nullopt);

/// The provider config with its hubs' agents (load_provider_config, then with_hub_agents
/// under the probe deadline when there are hubs), loading TLS configs into `tls`.
ProviderConfig load_fleet_config(const std::filesystem::path& path, TlsConfigCache& tls,
                                 const std::optional<HubPrefetch>& prefetch = std::nullopt);

/// Whether a hub's listing thread is still waiting on a hub that did not answer (a listing
/// ends as soon as another shows every agent): the process must then end without running
/// static destructors under it (std::_Exit after its output).
bool hub_listings_running();

/// The answer to /v1/agents of `hub`'s process at `url` as endpoints, each reached there (for
/// tests and the status command).
std::vector<AgentEndpoint> hub_agents_from_json(const HubEndpoint& hub, const std::string& url,
                                                const std::string& body);

}  // namespace garm_edge::provider
