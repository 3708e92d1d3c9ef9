#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "agent/base/clock.hpp"
#include "agent/base/config.hpp"
#include "agent/base/log.hpp"
#include "agent/caches/cache_store.hpp"
#include "agent/instances/instance_service.hpp"

namespace garm_edge::agent {

/// What a builder wrote to its status disk: "garm-edge-refresh exit=<code>" and the script's
/// output. Nothing when the first line is not that (the script never ran).
struct BuilderStatus {
  int exit_code = 0;
  std::string output;
};
std::optional<BuilderStatus> parse_builder_status(std::string_view disk_head);

/// Refreshes caches (docs/caches.md): boots a builder guest of the cache's refresh image with
/// the operator's script and a writable copy of the last generation, waits for it to power off,
/// and makes what it left the next generation; a failed refresh keeps the last good one and
/// says why. Due refreshes run on their own threads, one per cache at a time.
class CacheRefresher {
 public:
  struct Options {
    std::chrono::milliseconds poll{std::chrono::seconds(2)};
    /// After a failed refresh, the next is due after this (or the cache's interval, if
    /// shorter).
    std::chrono::seconds retry_after_failure{std::chrono::hours(1)};
  };
  CacheRefresher(const AgentConfig& config, CacheStore& store, InstanceService& instances,
                 const Clock& clock, Logger& log, Options options);
  CacheRefresher(const AgentConfig& config, CacheStore& store, InstanceService& instances,
                 const Clock& clock, Logger& log)
      : CacheRefresher(config, store, instances, clock, log, Options{}) {}
  ~CacheRefresher();
  CacheRefresher(const CacheRefresher&) = delete;
  CacheRefresher& operator=(const CacheRefresher&) = delete;

  /// Runs one refresh of `cache` now and waits for it; `waiting` is called every poll while
  /// the builder runs. Throws std::invalid_argument for an unknown cache.
  RefreshOutcome refresh(const std::string& cache, const std::function<void()>& waiting = {});
  /// Starts each refresh that is due on its own thread (the daemon's loop calls it).
  void start_due();
  /// Starts a refresh of `cache` on its own thread now; false when one is under way already.
  /// Throws std::invalid_argument for an unknown cache.
  bool start(const std::string& cache);
  /// Stops the builders under way (they count as failed) and waits for their threads.
  void stop();

 private:
  /// A refresh begun (store_.begin_refresh), to its end.
  RefreshOutcome run(const CacheConfig& cache, const std::function<void()>& waiting);
  /// Boots the builder and waits until it powers off; throws when it does not in time.
  void build(const CacheConfig& cache, const RefreshDisks& disks,
             const std::function<void()>& waiting);
  bool due(const CacheConfig& cache) const;
  /// Runs a refresh of `cache` (begun: marked refreshing) on a thread of its own; joins the
  /// threads of finished ones.
  void launch(const CacheConfig& cache);

  const AgentConfig& config_;
  CacheStore& store_;
  InstanceService& instances_;
  const Clock& clock_;
  Logger& log_;
  Options options_;
  std::atomic<bool> stopping_{false};
  /// A refresh on its own thread; joined once done, at the next start_due or at stop.
  struct Running {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  std::mutex threads_mutex_;
  std::vector<Running> threads_;
};

}  // namespace garm_edge::agent
