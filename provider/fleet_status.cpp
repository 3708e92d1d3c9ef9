#include "provider/fleet_status.hpp"

#include <algorithm>
#include <iomanip>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/text.hpp"
#include "provider/fleet.hpp"
#include "wire/json_fields.hpp"

namespace garm_edge::provider {
namespace {

constexpr const char* kUsage =
    "usage: garm-provider-edge status --config FILE [--json]\n"
    "  Asks every agent of the provider config at once and prints one row per agent.\n"
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
    images.push_back(image.name +
                     (image.arch ? "/" + std::string(wire::to_string(*image.arch)) : ""));
  }
  return joined(images, ",");
}

std::string table(const ProviderConfig& config, const std::vector<Fleet::CapacityProbe>& probes) {
  std::ostringstream out;
  out << std::left << std::setw(16) << "AGENT" << std::setw(10) << "STATE" << std::setw(9)
      << "VERSION" << std::setw(9) << "ARCH" << std::setw(18) << "HOST CPU/MiB" << std::setw(12)
      << "VCPU FREE" << std::setw(20) << "MEMORY FREE (MiB)" << std::setw(24) << "INSTANCES"
      << std::setw(22) << "WARM"
      << "IMAGES\n";
  for (std::size_t i = 0; i < probes.size(); ++i) {
    const auto& name = config.agents[i].name;
    const auto& probe = probes[i];
    if (!probe.capacity) {
      out << std::setw(16) << name << "error     " << printable_excerpt(probe.error, 400) << "\n";
      continue;
    }
    const auto& c = *probe.capacity;
    out << std::setw(16) << name << std::setw(10) << (c.draining ? "draining" : "ok")
        << std::setw(9) << printable_excerpt(c.version, 8) << std::setw(9)
        << printable_excerpt(c.machine, 8) << std::setw(18)
        << (std::to_string(c.cpus) + "/" + std::to_string(c.memory_mib)) << std::setw(12)
        << (std::to_string(c.free.vcpus) + "/" + std::to_string(c.limit.vcpus)) << std::setw(20)
        << (std::to_string(c.free.memory_mib) + "/" + std::to_string(c.limit.memory_mib))
        << std::setw(24) << states_text(c) << std::setw(22) << warm_text(c)
        << printable_excerpt(images_text(c), 400) << "\n";
  }
  return out.str();
}

std::string json_report(const ProviderConfig& config,
                        const std::vector<Fleet::CapacityProbe>& probes) {
  nlohmann::ordered_json agents = nlohmann::ordered_json::array();
  for (std::size_t i = 0; i < probes.size(); ++i) {
    nlohmann::ordered_json row = {{"name", config.agents[i].name},
                                  {"url", config.agents[i].url},
                                  {"reachable", probes[i].capacity.has_value()}};
    if (probes[i].capacity) {
      row["capacity"] = wire::to_json(*probes[i].capacity);
    } else {
      row["error"] = printable_excerpt(probes[i].error, 1000);
    }
    agents.push_back(row);
  }
  // Whatever an agent answered is printed as text a JSON reader can take, valid UTF-8 or not.
  return agents.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
}

}  // namespace

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
  try {
    config = load_provider_config(config_file);
  } catch (const std::exception& e) {
    return {1, "", std::string("garm-provider-edge: ") + e.what() + "\n"};
  }
  Fleet fleet(config);
  const auto probes = fleet.probe_capacity(std::chrono::steady_clock::now() + config.probe_timeout);
  const bool all_answered = std::all_of(
      probes.begin(), probes.end(), [](const auto& probe) { return probe.capacity.has_value(); });
  return {all_answered ? 0 : 1, json ? json_report(config, probes) : table(config, probes), ""};
}

}  // namespace garm_edge::provider
