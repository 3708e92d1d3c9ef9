#include "provider/provider_metrics.hpp"

#include <algorithm>
#include <map>

#include "common/durable_file.hpp"
#include "common/prometheus_text.hpp"
#include "provider/provider_config.hpp"

namespace garm_edge::provider {
namespace {

constexpr const char* kMetricsUsage =
    "usage: garm-provider-edge metrics --config FILE [--output FILE]\n";

struct KeptFor {
  std::uint64_t count = 0;
  std::chrono::system_clock::time_point oldest = std::chrono::system_clock::time_point::max();
};

}  // namespace

std::string render_provider_metrics(const std::vector<DeferredDelete>& kept) {
  std::map<std::pair<std::string, std::string>, KeptFor> by_agent;
  for (const auto& entry : kept) {
    auto& totals = by_agent[{entry.controller, entry.agent}];
    ++totals.count;
    totals.oldest = std::min(totals.oldest, entry.recorded_at);
  }
  PrometheusText text;
  text.family("garm_edge_provider_kept_deletes", "gauge",
              "Deletes garm asked for that wait for their agent to be reachable again.");
  for (const auto& [key, totals] : by_agent) {
    text.sample("garm_edge_provider_kept_deletes",
                {{"controller", key.first}, {"agent", key.second}}, totals.count);
  }
  text.family("garm_edge_provider_oldest_kept_delete_timestamp_seconds", "gauge",
              "When the oldest delete still kept for the agent was asked for, Unix time.");
  for (const auto& [key, totals] : by_agent) {
    text.sample("garm_edge_provider_oldest_kept_delete_timestamp_seconds",
                {{"controller", key.first}, {"agent", key.second}},
                std::chrono::duration<double>(totals.oldest.time_since_epoch()).count());
  }
  return text.str();
}

Outcome run_metrics(const std::vector<std::string>& arguments) {
  std::string config_file;
  std::string output;
  for (std::size_t i = 0; i + 1 < arguments.size(); i += 2) {
    if (arguments[i] == "--config") {
      config_file = arguments[i + 1];
    } else if (arguments[i] == "--output") {
      output = arguments[i + 1];
    } else {
      return {2, "", kMetricsUsage};
    }
  }
  if (config_file.empty() || arguments.size() % 2 != 0) {
    return {2, "", kMetricsUsage};
  }
  try {
    const auto config = load_provider_config(config_file);
    std::vector<DeferredDelete> kept;
    if (!config.session_dir.empty()) {
      kept = DeferredDeletes(config.session_dir).all();
    }
    auto text = render_provider_metrics(kept);
    if (output.empty()) {
      return {0, std::move(text), ""};
    }
    write_atomically(output, text, 0644);  // the node exporter reads it as its own user
    return {0, "", ""};
  } catch (const std::exception& e) {
    return {1, "", std::string("garm-provider-edge: ") + e.what() + "\n"};
  }
}

}  // namespace garm_edge::provider
