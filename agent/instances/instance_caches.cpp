// Cache disks of instances (docs/caches.md): which caches a guest gets, their overlays on the
// current generations, and their removal with the guest.

#include <algorithm>

#include "agent/instances/identifiers.hpp"
#include "agent/instances/instance_service.hpp"
#include "common/text.hpp"

namespace garm_edge::agent {
namespace {

using Code = ServiceError::Code;

/// The caches a pool asks for by name in its extra specs, checked: each one of `controller`'s.
std::vector<std::string> requested_caches(const wire::BootstrapInstance& bootstrap,
                                          const AgentConfig& config,
                                          const std::string& controller) {
  std::vector<std::string> names;
  if (!bootstrap.extra_specs || !bootstrap.extra_specs->is_object()) {
    return names;
  }
  const auto found = bootstrap.extra_specs->find("caches");
  if (found == bootstrap.extra_specs->end() || found->is_null()) {
    return names;
  }
  if (!found->is_array() || found->size() > kMaxCachesPerGuest) {
    throw ServiceError(Code::invalid_argument,
                       "extra_specs.caches: must be an array of at most 8 cache names");
  }
  for (const auto& item : *found) {
    const auto* name = item.is_string() ? &item.get_ref<const std::string&>() : nullptr;
    const auto* cache = name != nullptr ? config.find_cache(*name) : nullptr;
    if (cache == nullptr || cache->controller != controller) {
      // The same answer for a cache of another controller: it learns nothing of theirs.
      throw ServiceError(Code::invalid_argument,
                         "extra_specs.caches: this agent has no cache \"" +
                             printable_excerpt(name != nullptr ? *name : item.dump()) +
                             "\" for this controller");
    }
    names.push_back(*name);
  }
  return names;
}

}  // namespace

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
  const auto requested = requested_caches(bootstrap, config_, record.controller_id);
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
