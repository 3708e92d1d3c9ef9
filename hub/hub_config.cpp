#include "hub/hub_config.hpp"

#include <algorithm>

#include "common/durable_file.hpp"
#include "common/text.hpp"
#include "common/toml_reader.hpp"
#include "hub/hub_records.hpp"
#include "hub/postgres_state.hpp"
#include "net/https_client.hpp"
#include "wire/validate.hpp"

namespace garm_edge::hub {
namespace {

using TableReader = TomlTableReader;

ListenerConfig read_listener(TableReader& root, std::string_view key, ListenerConfig listener) {
  const auto* table = root.table(key);
  if (table == nullptr) {
    return listener;
  }
  TableReader in(*table, root.source(), "[" + std::string(key) + "]");
  listener.address = in.string("address").value_or(listener.address);
  listener.port = in.integer<std::uint16_t>("port", 0, 65535).value_or(listener.port);
  listener.max_connections =
      in.integer<std::size_t>("max_connections", 1, 65536).value_or(listener.max_connections);
  for (const auto& range : in.string_list("allow")) {
    try {
      listener.allow.push_back(net::AddressRange::parse(range));
    } catch (const std::invalid_argument& e) {
      in.fail(in.node("allow"), std::string("allow: ") + e.what());
    }
  }
  in.reject_unknown_keys();
  return listener;
}

HubClient read_client(const toml::table& table, const std::string& source, std::size_t index) {
  TableReader in(table, source, "[[clients]] #" + std::to_string(index + 1));
  HubClient client{.identity = in.required_string("identity"),
                   .controllers = in.string_list("controllers")};
  if (client.controllers.empty()) {
    in.fail(in.node("controllers"), "controllers must name at least one controller, or \"*\"");
  }
  for (auto& controller : client.controllers) {
    controller = ascii_lower(controller);
    // Relayed to agents in a header: a UUID or "*", nothing else.
    if (controller != "*" && !wire::is_uuid(controller)) {
      in.fail(in.node("controllers"), "controllers are garm controller UUIDs or \"*\"");
    }
  }
  in.reject_unknown_keys();
  return client;
}

void read_tunnels(TableReader& root, TunnelOptions& tunnels) {
  const auto* table = root.table("tunnels");
  if (table == nullptr) {
    return;
  }
  TableReader in(*table, root.source(), "[tunnels]");
  tunnels.max_per_agent =
      in.integer<std::size_t>("max_per_agent", 1, 1024).value_or(tunnels.max_per_agent);
  tunnels.max_waiting_per_agent = in.integer<std::size_t>("max_waiting_per_agent", 1, 65536)
                                      .value_or(tunnels.max_waiting_per_agent);
  tunnels.max_waiting_per_client = in.integer<std::size_t>("max_waiting_per_client", 1, 65536)
                                       .value_or(tunnels.max_waiting_per_client);
  if (const auto mib = in.integer<std::size_t>("max_waiting_mib_per_client", 1, 4096)) {
    tunnels.max_waiting_bytes_per_client = *mib * 1024 * 1024;
  }
  tunnels.heartbeat_interval = std::chrono::seconds(
      in.integer<long>("heartbeat_seconds", 1, 3600)
          .value_or(std::chrono::duration_cast<std::chrono::seconds>(tunnels.heartbeat_interval)
                        .count()));
  in.reject_unknown_keys();
}

void read_metrics(TableReader& root, FleetMetricsOptions& metrics) {
  const auto* table = root.table("metrics");
  if (table == nullptr) {
    return;
  }
  TableReader in(*table, root.source(), "[metrics]");
  if (const auto ms = in.integer<long>("agent_timeout_ms", 100, 120000)) {
    metrics.agent_timeout = std::chrono::milliseconds(*ms);
  }
  if (const auto kib = in.integer<std::size_t>("max_agent_kib", 64, 65536)) {
    metrics.max_agent_bytes = *kib * 1024;
  }
  if (const auto mib = in.integer<std::size_t>("max_total_mib", 1, 16384)) {
    metrics.max_total_bytes = *mib * 1024 * 1024;
  }
  metrics.max_in_flight =
      in.integer<std::size_t>("max_scrapes_at_once", 1, 64).value_or(metrics.max_in_flight);
  in.reject_unknown_keys();
}

void read_certificates(TableReader& root, CertificatePolicy& policy) {
  const auto* table = root.table("certificates");
  if (table == nullptr) {
    return;
  }
  TableReader in(*table, root.source(), "[certificates]");
  policy.host_days = in.integer<int>("host_days", 1, 825).value_or(policy.host_days);
  policy.renewal_window = in.number("renewal_window", 0.01, 1.0).value_or(policy.renewal_window);
  policy.min_renewal_interval =
      std::chrono::seconds(in.integer<long>("min_renewal_interval_seconds", 0, 86400)
                               .value_or(policy.min_renewal_interval.count()));
  in.reject_unknown_keys();
}

/// [database]: the URL as libpq takes it; its password may instead be in password_file (0600,
/// read at start), so that hub.toml holds no secret.
void read_database(TableReader& root, std::optional<net::PostgresTarget>& database) {
  const auto* table = root.table("database");
  if (table == nullptr) {
    return;
  }
  TableReader in(*table, root.source(), "[database]");
  try {
    database = net::parse_postgres_url(in.required_string("url"));
  } catch (const net::PostgresError& e) {
    in.fail(in.node("url"), std::string("url: ") + e.what());  // never repeats the URL
  }
  if (const auto path = in.absolute_path("password_file", false); !path.empty()) {
    if (!database->password.empty()) {
      in.fail(in.node("password_file"), "the url has a password already: give one or the other");
    }
    try {
      const auto text = read_text(path);
      database->password = text.substr(0, text.find_first_of("\r\n"));
    } catch (const DurableFileError& e) {
      in.fail(in.node("password_file"), e.what());
    }
  }
  if (const auto ms = in.integer<long>("timeout_ms", 100, 600000)) {
    database->timeout = std::chrono::milliseconds(*ms);
  }
  in.reject_unknown_keys();
}

}  // namespace

bool HubClient::allows(std::string_view controller) const {
  return std::any_of(controllers.begin(), controllers.end(),
                     [&](const auto& allowed) { return allowed == "*" || allowed == controller; });
}

const HubClient* HubConfig::find_client(std::string_view identity) const {
  const auto found = std::find_if(clients.begin(), clients.end(),
                                  [&](const auto& client) { return client.identity == identity; });
  return found == clients.end() ? nullptr : &*found;
}

HubConfig parse_hub_config(std::string_view text, const std::string& source) {
  const auto document = parse_toml_document(text, source);
  TableReader root(document, source, "top level");
  HubConfig config;
  if (root.node("state_dir") != nullptr) {
    config.state_dir = root.absolute_path("state_dir", true);
  }
  config.url = root.required_string("url");
  try {
    net::parse_https_url(config.url);
  } catch (const net::HttpsError& e) {
    root.fail(root.node("url"), e.what());
  }
  config.agents = read_listener(root, "agents", config.agents);
  config.providers = read_listener(root, "providers", config.providers);
  if (const auto* clients = root.array_of_tables("clients")) {
    for (std::size_t i = 0; i < clients->size(); ++i) {
      config.clients.push_back(read_client(*clients->get(i)->as_table(), source, i));
    }
  }
  if (config.clients.empty()) {
    root.fail(nullptr, "at least one [[clients]] entry is required: no provider could use the hub");
  }
  read_tunnels(root, config.tunnels);
  read_certificates(root, config.certificates);
  read_metrics(root, config.metrics);
  read_database(root, config.database);
  config.enrolment_failures_per_minute =
      root.integer<unsigned>("enrolment_failures_per_minute", 1, 1000)
          .value_or(config.enrolment_failures_per_minute);
  root.reject_unknown_keys();
  return config;
}

HubStore open_hub_store(const HubConfig& config) {
  HubStore store = config.database ? HubStore(config.state_dir, config.certificates,
                                              open_postgres_state(*config.database))
                                   : HubStore(config.state_dir, config.certificates);
  std::vector<std::string> identities;
  for (const auto& client : config.clients) {
    identities.push_back(client.identity);
  }
  store.reserve_client_names(std::move(identities));
  return store;
}

HubConfig load_hub_config(const std::filesystem::path& path) {
  return parse_hub_config(read_config_file(path, "hub config"), path.string());
}

}  // namespace garm_edge::hub
