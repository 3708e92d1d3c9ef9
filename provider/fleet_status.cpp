#include "provider/fleet_status.hpp"

#include <algorithm>
#include <iomanip>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/text.hpp"
#include "provider/deferred_deletes.hpp"
#include "provider/fleet.hpp"
#include "provider/hubs.hpp"
#include "wire/json_fields.hpp"
#include "wire/validate.hpp"

namespace garm_edge::provider {
namespace {

constexpr const char* kUsage =
    "usage: garm-provider-edge status --config FILE [--json]\n"
    "  Asks every agent of the provider config at once and prints one row per agent.\n"
    "       garm-provider-edge images pull NAME --config FILE\n"
    "  Every agent with a source for image NAME pulls it now, ahead of demand (the config's\n"
    "  client must be allowed every controller: controllers = [\"*\"]).\n"
    "       garm-provider-edge caches refresh NAME --config FILE\n"
    "  Every agent with cache NAME of a controller the config's client may act for refreshes\n"
    "  it now, in the background (docs/caches.md).\n"
    "  (Run by garm, with GARM_COMMAND set, it is garm's external provider.)\n";

std::string joined(const std::vector<std::string>& items, const std::string& separator) {
  std::string text;
  for (const auto& item : items) {
    text += (text.empty() ? "" : separator) + item;
  }
  return text;
}

std::string states_text(const wire::AgentCapacity& capacity) {
  std::vector<std::string> states;
  for (const auto& [state, count] : capacity.instances_by_state) {
    states.push_back(printable_excerpt(state, 32) + "=" + std::to_string(count));
  }
  return states.empty() ? "none" : joined(states, " ");
}

/// "2 ready, 1 warming" over the agent's [[warm]] entries; "-" with none.
std::string warm_text(const wire::AgentCapacity& capacity) {
  if (capacity.warm.empty()) {
    return "-";
  }
  std::uint64_t ready = 0;
  std::uint64_t warming = 0;
  for (const auto& offer : capacity.warm) {
    ready += offer.ready;
    warming += offer.warming;
  }
  return std::to_string(ready) + " ready, " + std::to_string(warming) + " warming";
}

std::string images_text(const wire::AgentCapacity& capacity) {
  std::vector<std::string> images;
  for (const auto& image : capacity.images) {
    std::string pull;
    if (image.state == "failed") {
      pull = "(pull failed)";
    } else if (image.state != "ready" || image.pulled_bytes > 0) {
      pull = image.total_bytes > 0
                 ? "(pulling " + std::to_string(image.pulled_bytes * 100 / image.total_bytes) + "%)"
                 : "(pulling)";
    }
    images.push_back(image.name +
                     (image.arch ? "/" + std::string(wire::to_string(*image.arch)) : "") + pull);
  }
  return joined(images, ",");
}

/// What the hub said of an agent it could not reach: "not connected (last seen ...): ".
std::string hub_text(const AgentEndpoint& agent) {
  if (!agent.via_hub || agent.via_hub->connected) {
    return "";
  }
  return "not connected to hub " + agent.hub + " (last seen " +
         (agent.via_hub->last_seen.empty() ? std::string("never since the hub started")
                                           : printable_excerpt(agent.via_hub->last_seen)) +
         "): ";
}

nlohmann::ordered_json hub_json(const AgentEndpoint& agent) {
  const auto& view = *agent.via_hub;
  nlohmann::ordered_json hub = {{"name", agent.hub},
                                {"connected", view.connected},
                                {"tunnels", view.tunnels},
                                {"version", view.version},
                                {"features", view.features}};
  if (!view.last_seen.empty()) {
    hub["last_seen"] = view.last_seen;
  }
  return hub;
}

std::string table(const ProviderConfig& config, const std::vector<Fleet::CapacityProbe>& probes) {
  std::ostringstream out;
  out << std::left << std::setw(16) << "AGENT" << std::setw(12) << "VIA" << std::setw(10) << "STATE"
      << std::setw(9) << "VERSION" << std::setw(9) << "ARCH" << std::setw(18) << "HOST CPU/MiB"
      << std::setw(12) << "VCPU FREE" << std::setw(20) << "MEMORY FREE (MiB)" << std::setw(24)
      << "INSTANCES" << std::setw(22) << "WARM"
      << "IMAGES\n";
  for (std::size_t i = 0; i < probes.size(); ++i) {
    const auto& agent = config.agents[i];
    const auto& probe = probes[i];
    out << std::setw(16) << agent.name << std::setw(12)
        << (agent.hub.empty() ? std::string("direct") : "hub " + agent.hub);
    if (!probe.capacity) {
      out << "error     " << printable_excerpt(hub_text(agent) + probe.error, 400) << "\n";
      continue;
    }
    const auto& c = *probe.capacity;
    out << std::setw(10) << (c.draining ? "draining" : "ok") << std::setw(9)
        << printable_excerpt(c.version, 8) << std::setw(9) << printable_excerpt(c.machine, 8)
        << std::setw(18) << (std::to_string(c.cpus) + "/" + std::to_string(c.memory_mib))
        << std::setw(12) << (std::to_string(c.free.vcpus) + "/" + std::to_string(c.limit.vcpus))
        << std::setw(20)
        << (std::to_string(c.free.memory_mib) + "/" + std::to_string(c.limit.memory_mib))
        << std::setw(24) << states_text(c) << std::setw(22) << warm_text(c)
        << printable_excerpt(images_text(c), 400) << "\n";
  }
  return out.str();
}

/// "max_instances 40, max_vcpus 80", or "-" when the provider sets no fleet quota.
std::string fleet_quota_text(const FleetQuota* quota) {
  if (quota == nullptr) {
    return "-";
  }
  std::vector<std::string> bounds;
  for (const auto& [key, value] :
       {std::pair{"max_instances", quota->max_instances}, std::pair{"max_vcpus", quota->max_vcpus},
        std::pair{"max_memory_mib", quota->max_memory_mib},
        std::pair{"max_disk_gib", quota->max_disk_gib}}) {
    if (value != 0) {
      bounds.push_back(std::string(key) + " " + std::to_string(value));
    }
  }
  return bounds.empty() ? "-" : joined(bounds, ", ");
}

/// Per controller the client may see: what it holds over the fleet, its fleet quota, and on
/// how many agents it is at the agent's own quota (docs/shares.md). Nothing when no agent
/// tells shares.
std::string shares_table(const ProviderConfig& config,
                         const std::vector<Fleet::CapacityProbe>& probes) {
  struct Row {
    wire::ResourceAmount used;
    std::size_t agents = 0;
    std::size_t at_quota = 0;
  };
  std::map<std::string, Row> rows;
  for (const auto& probe : probes) {
    for (const auto& share :
         probe.capacity ? probe.capacity->shares : std::vector<wire::ControllerShare>{}) {
      auto& row = rows[share.controller];
      row.used += share.used;
      ++row.agents;
      const auto& quota = share.quota;
      row.at_quota += (quota.instances != 0 && share.used.instances >= quota.instances) ||
                              (quota.vcpus != 0 && share.used.vcpus >= quota.vcpus) ||
                              (quota.memory_mib != 0 && share.used.memory_mib >= quota.memory_mib)
                          ? 1
                          : 0;
    }
  }
  if (rows.empty()) {
    return "";
  }
  std::ostringstream out;
  out << "\n"
      << std::left << std::setw(38) << "CONTROLLER" << std::setw(11) << "INSTANCES" << std::setw(8)
      << "VCPUS" << std::setw(14) << "MEMORY (MiB)" << std::setw(16) << "AT AGENT QUOTA"
      << "FLEET QUOTA\n";
  for (const auto& [controller, row] : rows) {
    out << std::setw(38) << printable_excerpt(controller, 36) << std::setw(11) << row.used.instances
        << std::setw(8) << row.used.vcpus << std::setw(14) << row.used.memory_mib << std::setw(16)
        << (std::to_string(row.at_quota) + " of " + std::to_string(row.agents))
        << fleet_quota_text(config.find_quota(controller)) << "\n";
  }
  return out.str();
}

constexpr std::size_t kDeferredRowsShown = 20;

std::string waited_text(const DeferredDelete& entry, std::chrono::system_clock::time_point now) {
  const auto seconds =
      std::chrono::duration_cast<std::chrono::seconds>(now - entry.recorded_at).count();
  if (seconds < 120) {
    return std::to_string(std::max<std::int64_t>(seconds, 0)) + " s";
  }
  return seconds < 7200 ? std::to_string(seconds / 60) + " min"
                        : std::to_string(seconds / 3600) + " h";
}

/// The deletes kept for agents that could not be reached, oldest first, or nothing.
std::string deferred_table(const ProviderConfig& config,
                           const std::vector<DeferredDelete>& deferred) {
  if (deferred.empty()) {
    return "";
  }
  const auto now = std::chrono::system_clock::now();
  std::ostringstream out;
  out << "\n"
      << deferred.size()
      << " deferred delete(s): garm deleted these while their agent could not be reached; the "
         "next call that reaches the agent carries them out.\n"
      << std::left << std::setw(16) << "AGENT" << std::setw(38) << "CONTROLLER" << std::setw(40)
      << "INSTANCE" << std::setw(10) << "WAITING"
      << "WHY\n";
  for (std::size_t i = 0; i < deferred.size() && i < kDeferredRowsShown; ++i) {
    const auto& entry = deferred[i];
    const bool configured = config.find_agent(entry.agent) != nullptr;
    out << std::setw(16) << (configured ? entry.agent : entry.agent + " (not in config)")
        << std::setw(38) << entry.controller << std::setw(40) << printable_excerpt(entry.ref, 38)
        << std::setw(10) << waited_text(entry, now) << printable_excerpt(entry.reason, 200) << "\n";
  }
  if (deferred.size() > kDeferredRowsShown) {
    out << "... and " << deferred.size() - kDeferredRowsShown << " more\n";
  }
  return out.str();
}

nlohmann::ordered_json deferred_json(const std::vector<DeferredDelete>& deferred,
                                     const std::string& agent) {
  nlohmann::ordered_json entries = nlohmann::ordered_json::array();
  for (const auto& entry : deferred) {
    if (entry.agent == agent) {
      entries.push_back({{"controller", entry.controller},
                         {"instance", entry.ref},
                         {"url", entry.url},
                         {"recorded_at", std::chrono::duration_cast<std::chrono::seconds>(
                                             entry.recorded_at.time_since_epoch())
                                             .count()},
                         {"reason", entry.reason}});
    }
  }
  return entries;
}

nlohmann::ordered_json json_report(const ProviderConfig& config,
                                   const std::vector<Fleet::CapacityProbe>& probes,
                                   const std::vector<DeferredDelete>& deferred) {
  nlohmann::ordered_json agents = nlohmann::ordered_json::array();
  for (std::size_t i = 0; i < probes.size(); ++i) {
    nlohmann::ordered_json row = {{"name", config.agents[i].name},
                                  {"url", config.agents[i].url},
                                  {"reachable", probes[i].capacity.has_value()}};
    if (config.agents[i].via_hub) {
      row["hub"] = hub_json(config.agents[i]);
    }
    if (probes[i].capacity) {
      row["capacity"] = wire::to_json(*probes[i].capacity);
    } else {
      row["error"] = printable_excerpt(probes[i].error, 1000);
    }
    row["deferred_deletes"] = deferred_json(deferred, config.agents[i].name);
    agents.push_back(row);
  }
  // Entries for agents the config no longer names are not forgotten either.
  std::set<std::string> unconfigured;
  for (const auto& entry : deferred) {
    if (config.find_agent(entry.agent) == nullptr && unconfigured.insert(entry.agent).second) {
      agents.push_back({{"name", entry.agent},
                        {"configured", false},
                        {"deferred_deletes", deferred_json(deferred, entry.agent)}});
    }
  }
  return agents;
}

/// The provider config with every hub's agents added; a hub that does not answer is left out
/// and named in `hub_errors`.
ProviderConfig load_fleet_view(const std::string& config_file, TlsConfigCache& tls,
                               std::vector<std::pair<std::string, std::string>>& hub_errors) {
  auto config = load_provider_config(config_file);
  const auto deadline = std::chrono::steady_clock::now() + config.probe_timeout;
  for (const auto& hub : std::vector<HubEndpoint>(config.hubs)) {
    auto one = config;
    one.hubs = {hub};
    try {
      config.agents = with_hub_agents(std::move(one), tls, deadline).agents;
    } catch (const HubError& e) {
      hub_errors.emplace_back(hub.name, e.what());
    }
  }
  return config;
}

/// One line per agent: the `action` ("pull", "refresh") started, under way, not configured
/// there, or the error.
std::string action_line(const AgentReply& reply, const std::string& action, bool& failed) {
  if (!reply.response) {
    failed = true;
    return "error: " + printable_excerpt(reply.error, 400);
  }
  const auto& response = *reply.response;
  std::string detail;
  try {
    const auto body = nlohmann::json::parse(response.body);
    detail = body.contains(action) ? body.at(action).get<std::string>()
                                   : body.at("message").get<std::string>();
  } catch (const nlohmann::json::exception&) {
    detail = printable_excerpt(response.body, 200);
  }
  if (response.status == 202) {
    return action + " " + detail;
  }
  if (response.status == 400 && error_code_of(response) == "invalid_argument") {
    return "skipped: " + detail;  // not one this agent has
  }
  failed = true;
  return "error: HTTP " + std::to_string(response.status) + ": " + detail;
}

/// POST `path` to every agent of the config (direct or through a hub) at once: a line each.
Outcome ask_every_agent(const std::string& config_file, const std::string& path,
                        const std::string& action) {
  TlsConfigCache tls;
  std::vector<std::pair<std::string, std::string>> hub_errors;
  ProviderConfig config;
  try {
    config = load_fleet_view(config_file, tls, hub_errors);
  } catch (const std::exception& e) {
    return {1, "", std::string("garm-provider-edge: ") + e.what() + "\n"};
  }
  Fleet fleet(config, &tls);
  const auto replies = fleet.request_all("POST", path, CallKind::request);
  bool failed = !hub_errors.empty();
  std::ostringstream out;
  for (std::size_t i = 0; i < replies.size(); ++i) {
    out << config.agents[i].name << ": " << action_line(replies[i], action, failed) << "\n";
  }
  for (const auto& [hub, error] : hub_errors) {
    out << "hub " << hub << ": error: " << printable_excerpt(error, 400) << "\n";
  }
  return {failed ? 1 : 0, out.str(), ""};
}

}  // namespace

Outcome run_images(const std::vector<std::string>& arguments) {
  if (arguments.size() != 4 || arguments[0] != "pull" || arguments[2] != "--config") {
    return {2, "", kUsage};
  }
  const auto& image = arguments[1];
  try {
    wire::validate_resource_name(image, "image");
  } catch (const std::exception& e) {
    return {2, "", std::string("garm-provider-edge: ") + e.what() + "\n"};
  }
  return ask_every_agent(arguments[3], "/v1/images/" + image + "/pull", "pull");
}

Outcome run_caches(const std::vector<std::string>& arguments) {
  if (arguments.size() != 4 || arguments[0] != "refresh" || arguments[2] != "--config") {
    return {2, "", kUsage};
  }
  const auto& cache = arguments[1];
  if (cache.empty() || cache.size() > 24 ||
      cache.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-") != std::string::npos) {
    return {2, "", "garm-provider-edge: a cache's name is 1-24 of a-z, 0-9 and '-'\n"};
  }
  return ask_every_agent(arguments[3], "/v1/caches/" + cache + "/refresh", "refresh");
}

Outcome run_status(const std::vector<std::string>& arguments) {
  std::string config_file;
  bool json = false;
  for (std::size_t i = 0; i < arguments.size(); ++i) {
    if (arguments[i] == "--json") {
      json = true;
    } else if (arguments[i] == "--config" && i + 1 < arguments.size()) {
      config_file = arguments[++i];
    } else {
      return {2, "", kUsage};
    }
  }
  if (config_file.empty()) {
    return {2, "", kUsage};
  }
  ProviderConfig config;
  TlsConfigCache tls;
  // Each hub on its own: one that does not answer is a row of its own, not the end of the view.
  std::vector<std::pair<std::string, std::string>> hub_errors;
  try {
    config = load_fleet_view(config_file, tls, hub_errors);
  } catch (const std::exception& e) {
    return {1, "", std::string("garm-provider-edge: ") + e.what() + "\n"};
  }
  Fleet fleet(config, &tls);
  const auto probes = fleet.probe_capacity(std::chrono::steady_clock::now() + config.probe_timeout);
  const bool all_answered = std::all_of(
      probes.begin(), probes.end(), [](const auto& probe) { return probe.capacity.has_value(); });
  std::vector<DeferredDelete> deferred;
  if (!config.session_dir.empty()) {
    deferred = DeferredDeletes(config.session_dir).all();
  }
  if (json) {
    auto report = json_report(config, probes, deferred);
    for (const auto& [hub, error] : hub_errors) {
      report.push_back(
          {{"hub", hub}, {"reachable", false}, {"error", printable_excerpt(error, 1000)}});
    }
    // Whatever an agent answered is printed as text a JSON reader can take, valid UTF-8 or not.
    return {all_answered && hub_errors.empty() ? 0 : 1,
            report.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n",
            ""};
  }
  std::string hubs;
  for (const auto& [hub, error] : hub_errors) {
    hubs += "hub " + hub + ": error: " + printable_excerpt(error, 400) + "\n";
  }
  return {all_answered && hub_errors.empty() ? 0 : 1,
          table(config, probes) + shares_table(config, probes) + hubs +
              deferred_table(config, deferred),
          ""};
}

}  // namespace garm_edge::provider
