#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "hub/fleet_metrics.hpp"
#include "hub/hub_store.hpp"
#include "hub/tunnels.hpp"
#include "net/address_range.hpp"
#include "net/postgres_client.hpp"

namespace garm_edge::hub {

struct ListenerConfig {
  std::string address;
  std::uint16_t port = 0;
  std::vector<net::AddressRange> allow;  // empty: any address
  std::size_t max_connections = 1024;
};

/// A garm-provider-edge identity (its client certificate's CN) and the controllers it may act
/// for, as an agent's [[api.clients]]: through the hub, the hub checks it for every agent.
struct HubClient {
  std::string identity;
  std::vector<std::string> controllers;  // UUIDs, lower case; "*" for any
  bool allows(std::string_view controller) const;
};

/// garm-edge-hub's TOML config (docs/fleet.md).
struct HubConfig {
  std::filesystem::path state_dir = "/var/lib/garm-edge-hub";
  /// What agents dial, https://host[:port]: goes into every join token, so it must be the
  /// name or address the hub's certificate carries, as the agents reach it.
  std::string url;
  ListenerConfig agents{.address = "0.0.0.0", .port = 8444, .allow = {}, .max_connections = 4096};
  ListenerConfig providers{
      .address = "127.0.0.1", .port = 8445, .allow = {}, .max_connections = 256};
  std::vector<HubClient> clients;
  TunnelOptions tunnels;
  CertificatePolicy certificates;
  /// Failed enrolments one address may make per minute before it is refused for the rest of it.
  unsigned enrolment_failures_per_minute = 5;
  /// A request relayed to an agent (the wait for a tunnel included).
  std::chrono::milliseconds relay_timeout{std::chrono::seconds(330)};
  /// The fleet scrape, GET /metrics for a metrics reader (docs/observability.md).
  FleetMetricsOptions metrics;
  /// [database]: the records in PostgreSQL, shared by every hub of the fleet; nothing: files
  /// in state_dir (one hub).
  std::optional<net::PostgresTarget> database;

  const HubClient* find_client(std::string_view identity) const;
};

/// The hub's state with the config's certificate policy, its [[clients]] names reserved (no host
/// may take them): its records in the config's database, or files in its state directory.
/// Throws net::PostgresError when the database cannot be reached.
HubStore open_hub_store(const HubConfig& config);

/// Throws ConfigError naming the file, line, column and key that are wrong.
HubConfig parse_hub_config(std::string_view text, const std::string& source);
HubConfig load_hub_config(const std::filesystem::path& path);

}  // namespace garm_edge::hub
