#include "agent/caches/job_caches.hpp"

#include <sstream>

#include "common/config_error.hpp"
#include "common/prometheus_text.hpp"
#include "common/subprocess.hpp"

namespace garm_edge::agent {
namespace {

/// qemu-img's part of a refresh (an overlay, a check, a convert of the cache's size).
constexpr std::chrono::hours kDiskToolTimeout{2};

std::uint64_t age_seconds(const std::string& made_at, const Clock& clock) {
  const auto made = parse_rfc3339(made_at);
  if (!made || clock.now() < *made) {
    return 0;
  }
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::seconds>(clock.now() - *made).count());
}

}  // namespace

JobCaches::JobCaches(const AgentConfig& config, InstanceService& instances, const Clock& clock,
                     Logger& log)
    : config_(config),
      tools_(kDiskToolTimeout),
      store_(config, tools_, clock, log),
      refresher_(config, store_, instances, clock, log) {}

std::vector<CacheStatus> JobCaches::statuses() const {
  std::vector<CacheStatus> statuses;
  for (const auto& state : store_.states()) {
    const auto* cache = config_.find_cache(state.name);
    statuses.push_back(
        {.name = state.name,
         .controller = cache != nullptr ? cache->controller : std::string(),
         .generation = state.current ? state.current->number : 0,
         .made_at = state.current_made_at,
         .refreshing = state.refreshing,
         .error = state.last_refresh && !state.last_refresh->ok ? state.last_refresh->error : ""});
  }
  return statuses;
}

std::unique_ptr<JobCaches> make_job_caches(const AgentConfig& config, InstanceService& instances,
                                           const Clock& clock, Logger& log) {
  if (config.caches.empty()) {
    return nullptr;
  }
  if (!find_system_program("qemu-img")) {
    throw ConfigError("[[caches]] need qemu-img in " + system_program_path() +
                      " (Debian: apt install qemu-utils)");
  }
  return std::make_unique<JobCaches>(config, instances, clock, log);
}

std::string render_cache_metrics(const CacheStore& store, const Clock& clock) {
  const auto states = store.states();
  PrometheusText text;
  text.family("garm_edge_cache_ready", "gauge",
              "1 when the cache has a generation new guests get.");
  for (const auto& state : states) {
    text.sample("garm_edge_cache_ready", {{"cache", state.name}},
                std::uint64_t{state.current ? 1U : 0U});
  }
  text.family("garm_edge_cache_generation", "gauge",
              "The number of the cache's current generation; 0: none yet.");
  for (const auto& state : states) {
    text.sample("garm_edge_cache_generation", {{"cache", state.name}},
                state.current ? state.current->number : std::uint64_t{0});
  }
  text.family("garm_edge_cache_generation_age_seconds", "gauge",
              "How long ago the cache's current generation was made.");
  for (const auto& state : states) {
    if (state.current) {
      text.sample("garm_edge_cache_generation_age_seconds", {{"cache", state.name}},
                  age_seconds(state.current_made_at, clock));
    }
  }
  text.family("garm_edge_cache_retired_generations", "gauge",
              "Replaced generations still on disk because guests back onto them.");
  for (const auto& state : states) {
    text.sample("garm_edge_cache_retired_generations", {{"cache", state.name}},
                std::uint64_t{state.retired});
  }
  text.family("garm_edge_cache_refreshes_total", "counter",
              "Refreshes that ended: a new generation, or failed (the last one stays).");
  for (const auto& state : states) {
    text.sample("garm_edge_cache_refreshes_total", {{"cache", state.name}, {"outcome", "ok"}},
                state.refreshes_ok);
    text.sample("garm_edge_cache_refreshes_total", {{"cache", state.name}, {"outcome", "failed"}},
                state.refreshes_failed);
  }
  text.family("garm_edge_cache_last_refresh_seconds", "gauge",
              "How long the cache's last refresh took, builder boot to swap.");
  for (const auto& state : states) {
    if (state.last_refresh) {
      text.sample("garm_edge_cache_last_refresh_seconds", {{"cache", state.name}},
                  state.last_refresh->seconds);
    }
  }
  return text.str();
}

std::string cache_list(const CacheStore& store, const Clock& clock) {
  std::ostringstream out;
  for (const auto& state : store.states()) {
    out << state.name << ": ";
    if (state.current) {
      out << "generation " << state.current->number << ", made "
          << age_seconds(state.current_made_at, clock) / 60 << " min ago";
    } else {
      out << "no generation yet";
    }
    if (state.retired > 0) {
      out << ", " << state.retired << " older still used by guests";
    }
    if (state.refreshing) {
      out << ", refreshing now";
    }
    if (state.last_refresh && !state.last_refresh->ok) {
      out << "; the last refresh failed: " << state.last_refresh->error;
    }
    out << "\n";
  }
  return out.str();
}

}  // namespace garm_edge::agent
