#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace garm_edge::provider {

struct AgentEndpoint {
  std::string name;  // prefixes the provider IDs of its instances: "<name>:<uuid>"
  std::string url;   // https://host[:port]
  std::filesystem::path ca;
  std::filesystem::path certificate;
  std::filesystem::path key;
  /// Certificates the CA revoked (PEM or DER, as the hub writes pki/crl.pem): read by every
  /// process, so a host removed at the hub is refused here too. Empty: none.
  std::filesystem::path crl = {};
  /// The agent's certificate must name it as a host (urn:garm-edge:agent:<name>); one that
  /// names another host, a client or the hub is refused either way.
  bool require_host_identity = false;
  /// Placement prefers agents of higher weight (see Placement); 1-1000.
  unsigned weight = 100;
  /// What a pool can ask for in its extra specs (`agent_labels`): a GPU, a rack, ...
  std::vector<std::string> labels;
  /// For an agent reached through a hub (docs/fleet.md): the hub's name, the path its requests
  /// go under at the hub, and what the hub said of it when this process asked.
  std::string hub = {};
  std::string path_prefix = {};
  /// The other processes of the same hub (several hubs on one database), those that listed the
  /// agent connected first, tried in order when `url` cannot be reached or has no tunnel to it:
  /// only while the request was not sent, so nothing runs twice.
  std::vector<std::string> other_hub_urls = {};
  struct HubView {
    bool connected = false;
    std::size_t tunnels = 0;
    std::string last_seen;  // ISO 8601; empty: never since the hub started
    std::string version;
    std::vector<std::string> features;
  };
  std::optional<HubView> via_hub = std::nullopt;
};

/// A hub whose agents join the fleet: `urls` are its provider listeners, one per hub process
/// when several hubs share one database (docs/fleet.md), all asked at once; the
/// certificate is a client certificate of the hub's CA whose CN is in the hubs' [[clients]].
struct HubEndpoint {
  std::string name;
  std::vector<std::string> urls;  // at least one
  std::filesystem::path ca;
  std::filesystem::path certificate;
  std::filesystem::path key;
  unsigned weight = 100;  // for every agent of the hub
  std::filesystem::path crl = {};
};

/// `[[quotas]]`: the most one controller may hold across the whole fleet, warm guests kept for
/// it included (docs/shares.md); a field 0: no bound on it.
struct FleetQuota {
  std::string controller;  // a UUID, lower case
  std::uint64_t max_instances = 0;
  std::uint64_t max_vcpus = 0;
  std::uint64_t max_memory_mib = 0;
  std::uint64_t max_disk_gib = 0;
};

/// How CreateInstance chooses among the agents that can take an instance.
enum class Placement {
  spread,  // the most free memory (scaled by weight): load spread over the fleet
  pack,    // the highest weight, then config order: fill one host before the next
};

/// garm-provider-edge's TOML config (GARM_PROVIDER_CONFIG_FILE).
struct ProviderConfig {
  /// [[agents]] entries, then (once with_hub_agents ran) every agent enrolled at a hub.
  std::vector<AgentEndpoint> agents;
  std::vector<HubEndpoint> hubs;
  Placement placement = Placement::spread;
  std::chrono::milliseconds connect_timeout{std::chrono::seconds(5)};
  /// Every call but create; below garm's exec_timeout_seconds when that is set.
  std::chrono::milliseconds request_timeout{std::chrono::seconds(60)};
  /// CreateInstance; below the pool's runner_bootstrap_timeout (20 min by default).
  std::chrono::milliseconds create_timeout{std::chrono::seconds(300)};
  /// The one deadline for asking every agent in parallel (lookups by name, placement's
  /// capacity): an agent that does not answer within it is skipped, not waited for.
  std::chrono::milliseconds probe_timeout{std::chrono::seconds(3)};
  /// Where TLS sessions are kept between invocations (garm gives no HOME); empty: none.
  std::filesystem::path session_dir;
  std::vector<FleetQuota> quotas;

  const AgentEndpoint* find_agent(const std::string& name) const;
  const FleetQuota* find_quota(const std::string& controller) const;
};

/// Throws ConfigError naming the file, line, column and key that are wrong.
ProviderConfig load_provider_config(const std::filesystem::path& path);
ProviderConfig parse_provider_config(const std::string& text, const std::string& source);

/// The JSON Schema of this config (GetConfigJSONSchema).
std::string provider_config_json_schema();

}  // namespace garm_edge::provider
