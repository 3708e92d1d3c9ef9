#pragma once

#include <memory>
#include <string>

#include "agent/base/clock.hpp"
#include "agent/base/config.hpp"
#include "agent/base/log.hpp"
#include "agent/caches/cache_disk_tools.hpp"
#include "agent/caches/cache_refresher.hpp"
#include "agent/caches/cache_store.hpp"
#include "agent/instances/instance_service.hpp"

namespace garm_edge::agent {

/// The caches with their real boundaries (qemu-img, the host's disk, builder guests), as the
/// instance service and the control API see them.
class JobCaches final : public CacheGenerations {
 public:
  JobCaches(const AgentConfig& config, InstanceService& instances, const Clock& clock, Logger& log);
  CacheStore& store() { return store_; }
  CacheRefresher& refresher() { return refresher_; }

  std::optional<CacheGeneration> current(const std::string& cache) const override {
    return store_.current(cache);
  }
  void remove_unused(const std::function<bool(const std::string& path)>& in_use) override {
    store_.remove_unused(in_use);
  }
  std::vector<CacheStatus> statuses() const override;
  bool refresh(const std::string& cache) override { return refresher_.start(cache); }

 private:
  const AgentConfig& config_;
  HostCacheDiskTools tools_;
  CacheStore store_;
  CacheRefresher refresher_;
};

/// Nothing when no [[caches]] entry is configured. Throws ConfigError when the host has no
/// qemu-img or the caches' directory cannot be made.
std::unique_ptr<JobCaches> make_job_caches(const AgentConfig& config, InstanceService& instances,
                                           const Clock& clock, Logger& log);

/// The caches' state as Prometheus text (docs/caches.md lists the series).
std::string render_cache_metrics(const CacheStore& store, const Clock& clock);

/// `caches list`: one line per cache.
std::string cache_list(const CacheStore& store, const Clock& clock);

}  // namespace garm_edge::agent
