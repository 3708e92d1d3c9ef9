// Cache disks of instances (docs/caches.md): which caches a guest gets, their overlays on the
// current generations, and their removal with the guest.

#include <algorithm>

#include "agent/instances/identifiers.hpp"
#include "agent/instances/instance_service.hpp"
#include "common/text.hpp"
#include "wire/error.hpp"
#include "wire/pool_shape.hpp"

namespace garm_edge::agent {

using Code = ServiceError::Code;

std::vector<std::string> InstanceService::requested_caches(
    const std::optional<nlohmann::json>& extra_specs, const std::string& controller) const {
  std::vector<std::string> names;
  try {
    names = wire::parse_cache_names(extra_specs);
  } catch (const wire::WireError& e) {
    throw ServiceError(Code::invalid_argument, e.what());
  }
  for (const auto& name : names) {
    const auto* cache = config_.find_cache(name);
    if (cache == nullptr || cache->controller != controller) {
      // The same answer for a cache of another controller: it learns nothing of theirs.
      throw ServiceError(Code::invalid_argument, "extra_specs.caches: this agent has no cache \"" +
                                                     name + "\" for this controller");
    }
  }
  return names;
}

void InstanceService::use_cache_generations(CacheGenerations& caches) {
  caches_ = &caches;
}

bool InstanceService::generation_in_use(const std::string& path) {
  const auto records = store_.list();
  return std::any_of(records.begin(), records.end(), [&](const InstanceRecord& record) {
    return std::any_of(record.caches.begin(), record.caches.end(),
                       [&](const CacheDiskRecord& disk) { return disk.generation_path == path; });
  });
}

void InstanceService::plan_caches(CreatePlan& plan, const wire::BootstrapInstance& bootstrap) {
  auto& record = plan.record;
  const auto requested = requested_caches(bootstrap.extra_specs, record.controller_id);
  if (caches_ == nullptr || record.os_type != wire::OsType::linux) {
    return;
  }
  for (const auto& cache : config_.caches) {
    if (!cache.serves(record.controller_id, record.image, record.pool_id, requested) ||
        record.caches.size() == kMaxCachesPerGuest) {
      continue;
    }
    const auto generation = caches_->current(cache.name);
    if (!generation) {
      log_.warning("create " + record.name + ": cache " + cache.name +
                   " has no generation yet; the guest starts without it");
      continue;
    }
    CacheDiskRecord disk{.cache = cache.name,
                         .generation = generation->number,
                         .generation_path = generation->path,
                         .volume_name = cache_volume_name_for(record.domain_name, cache.name),
                         .serial = "garm-cache-" + std::to_string(record.caches.size()),
                         .mount = cache.mount};
    plan.cache_volumes.push_back({.pool = record.volume_pool,
                                  .name = disk.volume_name,
                                  .capacity_bytes = cache.size_gib << 30U,
                                  .backing_path = disk.generation_path,
                                  .backing_format = "qcow2"});
    record.caches.push_back(std::move(disk));
  }
}

void InstanceService::create_cache_volumes(CreatePlan& plan) {
  for (std::size_t i = 0; i < plan.cache_volumes.size(); ++i) {
    const auto volume = hypervisor_.create_overlay(plan.cache_volumes[i]);
    plan.domain.extra_disks.push_back(
        {.path = volume.path, .format = "qcow2", .serial = plan.record.caches[i].serial});
  }
}

void InstanceService::delete_cache_volumes(const InstanceRecord& record) {
  for (const auto& disk : record.caches) {
    hypervisor_.delete_volume(record.volume_pool, disk.volume_name);
  }
}

}  // namespace garm_edge::agent
