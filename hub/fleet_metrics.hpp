#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "hub/hub_store.hpp"
#include "hub/tunnels.hpp"

namespace garm_edge::hub {

/// [metrics] of hub.toml: the fleet scrape's bounds.
struct FleetMetricsOptions {
  /// Each agent's answer through its tunnel; below Prometheus's scrape_timeout (10 s by
  /// default), so a slow host shows as garm_edge_agent_up 0 instead of failing the scrape.
  std::chrono::milliseconds agent_timeout{std::chrono::seconds(8)};
  /// One agent's /metrics; a larger answer is dropped (that agent is down for the scrape).
  std::size_t max_agent_bytes = 4 * 1024 * 1024;
  /// All agents' answers of one scrape together.
  std::size_t max_total_bytes = 256 * 1024 * 1024;
  /// Scrapes at once (two Prometheus servers of an HA pair); more are refused with 429.
  std::size_t max_in_flight = 2;
};

/// One agent's part of a fleet scrape.
struct AgentScrape {
  bool up = false;
  std::string text;    // its /metrics, when up
  std::string error;   // why not, when down
  double seconds = 0;  // how long its answer took
};

/// Asks every agent in `connected` for /metrics over its tunnel, as metrics reader `reader`,
/// each within the options' deadline; `done` runs once with every agent's part.
void scrape_agents(Tunnels& tunnels, const std::vector<std::string>& connected,
                   const std::string& reader, const FleetMetricsOptions& options,
                   std::function<void(std::map<std::string, AgentScrape>)> done);

/// What the hub knows of its fleet without asking it: who is enrolled, connected, last seen,
/// certificates' expiry.
struct FleetView {
  std::vector<AgentRecord> enrolled;
  std::vector<AgentPresence> presence;
  std::filesystem::path pki;  // the hub's certificate, its CA and its clients'
  /// Placement probes of one agent the hub answered from its view, and those it relayed.
  std::uint64_t probes_answered_by_hub = 0;
  std::uint64_t probes_relayed = 0;
  std::size_t placement_views = 0;  // agents whose view the hub holds
};

/// The whole answer of the hub's /metrics: the hub's own series (garm_edge_agent_up for every
/// enrolled agent, answered or not, the tunnels, heartbeats and certificates) and every agent's
/// series labelled agent="NAME" (common/prometheus_merge.hpp).
std::string render_fleet_metrics(const FleetView& view,
                                 const std::map<std::string, AgentScrape>& scrapes);

}  // namespace garm_edge::hub
