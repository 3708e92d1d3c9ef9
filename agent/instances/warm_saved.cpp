// Saved warm guests (docs/warm-guests.md): a ready warm guest's memory written to a raw volume
// beside its overlay and its domain shut off, restored when garm's create takes it.

#include <chrono>

#include "agent/instances/domain_view.hpp"
#include "agent/instances/identifiers.hpp"
#include "agent/instances/instance_service.hpp"
#include "agent/instances/warm_spec.hpp"
#include "common/unix_time.hpp"

namespace garm_edge::agent {
namespace {

bool saveable(const std::optional<InstanceRecord>& record) {
  return record && record->warm && record->warm->state == WarmState::ready &&
         record->intent == Intent::created && record->controller_id == kWarmControllerId;
}

}  // namespace

bool InstanceService::save_warm(std::string_view domain_name) {
  const std::string name(domain_name);
  InstanceRecord saving;
  {
    // Saving, under the lock: no create binds it and no second save starts meanwhile. The save
    // itself runs without the lock: a delete meanwhile destroys the domain and the save fails.
    auto lock = instance_locks_.lock(name);
    auto record = store_.get(name);
    if (!saveable(record)) {
      return false;
    }
    record->warm->state = WarmState::saving;
    store_.put(*record);
    saving = *record;
  }
  try {
    const auto domain = hypervisor_.find_by_uuid(saving.domain_uuid);
    if (!domain || domain->state != hypervisor::PowerState::running) {
      throw ServiceError(ServiceError::Code::internal, "its domain does not run");
    }
    // Tagged first: once shut off, the domain's tags tell capacity it holds no memory.
    hypervisor_.set_tags(domain->uuid, bound_tags(saving, *domain));
    const auto volume_name = memory_volume_name_for(name);
    hypervisor_.delete_volume(saving.volume_pool, volume_name);  // a failed save's leftover
    const auto volume = hypervisor_.create_overlay({.pool = saving.volume_pool,
                                                    .name = volume_name,
                                                    .capacity_bytes = 0,
                                                    .backing_path = "",
                                                    .backing_format = "",
                                                    .format = "raw"});
    hypervisor_.save(domain->uuid, volume.path);
  } catch (const std::exception& e) {
    log_.warning("warm guest " + name + " could not be saved: " + e.what());
    auto lock = instance_locks_.lock(name);
    if (auto record = store_.get(name);
        record && record->warm && record->warm->state == WarmState::saving) {
      teardown(*record);  // neither running as it was nor saved: the pool starts another
    }
    throw;
  }
  auto lock = instance_locks_.lock(name);
  auto record = store_.get(name);
  if (!record || !record->warm || record->warm->state != WarmState::saving) {
    return false;  // removed meanwhile
  }
  record->warm->state = WarmState::saved;
  record->warm->saved_at = format_rfc3339(clock_.now());
  store_.put(*record);
  events_.record("warm-saved", record->name, record->controller_id,
                 "warm guest of " + record->image + "/" + record->flavor + " saved to disk");
  return true;
}

bool InstanceService::saved_intact(const InstanceRecord& record) {
  const auto domain = hypervisor_.find_by_uuid(record.domain_uuid);
  return domain && domain->state == hypervisor::PowerState::shutoff &&
         hypervisor_.find_volume(record.volume_pool, memory_volume_name_for(record.domain_name));
}

std::optional<hypervisor::Domain> InstanceService::restore_saved(const InstanceRecord& saved,
                                                                 const CreatePlan& plan) {
  const auto domain = hypervisor_.find_by_uuid(saved.domain_uuid);
  if (!domain) {
    return std::nullopt;  // reconcile drops its record
  }
  const auto running = running_resources_of(*domain);
  const auto hold = admit_create(plan, Restoring{.domain_name = saved.domain_name,
                                                 .held = running,
                                                 .added = {.vcpus = running.vcpus,
                                                           .memory_mib = running.memory_mib,
                                                           .instances = 0,
                                                           .disk_gib = 0}});
  const auto fall_back = [&](RestoreFallback reason, const std::string& why) {
    warm_restores_.fell_back(reason);
    log_.warning("create " + plan.record.name + ": saved warm guest " + saved.domain_name +
                 " could not be restored (" + why + "); removing it and creating a guest");
    try {
      teardown(saved);
    } catch (const std::exception& e) {
      log_.warning("saved warm guest " + saved.domain_name + " not removed yet: " + e.what());
    }
    return std::optional<hypervisor::Domain>();
  };
  const auto volume_name = memory_volume_name_for(saved.domain_name);
  const auto volume = hypervisor_.find_volume(saved.volume_pool, volume_name);
  if (!volume) {
    return fall_back(RestoreFallback::missing_state, "its memory file is gone");
  }
  const auto began = std::chrono::steady_clock::now();
  try {
    hypervisor_.restore(volume->path);
  } catch (const std::exception& e) {
    return fall_back(RestoreFallback::restore_failed, e.what());
  }
  auto restored = hypervisor_.find_by_uuid(saved.domain_uuid);
  if (!restored || restored->state != hypervisor::PowerState::running) {
    return fall_back(RestoreFallback::not_running, "its domain does not run after the restore");
  }
  const auto took = std::chrono::steady_clock::now() - began;
  warm_restores_.restored(std::chrono::duration<double>(took).count());
  log_.info("saved warm guest " + saved.domain_name + " restored in " +
            std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(took).count()) +
            " ms for " + plan.record.name);
  try {
    hypervisor_.delete_volume(saved.volume_pool, volume_name);
  } catch (const std::exception& e) {
    log_.warning("the memory file of " + saved.domain_name +
                 " stays until it is deleted: " + e.what());
  }
  return restored;
}

}  // namespace garm_edge::agent
