#include <set>

#include "agent/instances/domain_view.hpp"
#include "agent/instances/identifiers.hpp"
#include "agent/instances/instance_service.hpp"

namespace garm_edge::agent {
namespace {

using Code = ServiceError::Code;

}  // namespace

bool InstanceService::remove(const ControllerId& controller, const InstanceRef& instance) {
  return guarded("delete " + instance.str(), [&] {
    const auto [locks, target] = lock_target(controller, instance);
    deletes_.mark(target.domain_name);
    return remove_locked(controller, target);
  });
}

bool InstanceService::remove_locked(const ControllerId& controller, const Target& target) {
  auto record = store_.get(target.domain_name);
  if (record && (record->controller_id != controller.str() ||
                 (target.uuid && record->domain_uuid != *target.uuid))) {
    record.reset();  // another controller's, or an older instance of this name
  }
  const auto domain = locate(controller, target);
  if (!record && !domain) {
    return false;
  }
  InstanceRecord doomed = record ? *record : record_for_orphan(*domain, config_.storage_pool);
  doomed.intent = Intent::deleting;
  events_.record("destroying", doomed.name, doomed.controller_id, "domain " + doomed.domain_name);
  store_.put(doomed);
  teardown(doomed);
  if (domain && domain->uuid != doomed.domain_uuid) {
    teardown(record_for_orphan(*domain, config_.storage_pool));
  }
  startup_.forget(doomed.domain_name);
  events_.record("destroyed", doomed.name, doomed.controller_id, "domain " + doomed.domain_name);
  return true;
}

void InstanceService::start(const ControllerId& controller, const InstanceRef& instance) {
  guarded("start " + instance.str(), [&] {
    const auto [lock, domain] = lock_existing(controller, instance);
    const auto record = store_.get(domain.name);
    if (record && record->intent == Intent::deleting) {
      throw ServiceError(Code::conflict, "instance " + record->name + " is being deleted");
    }
    hypervisor_.start(domain.uuid);
  });
}

void InstanceService::stop(const ControllerId& controller, const InstanceRef& instance,
                           bool force) {
  guarded("stop " + instance.str(), [&] {
    const auto [lock, domain] = lock_existing(controller, instance);
    if (force) {
      hypervisor_.destroy(domain.uuid);
    } else {
      hypervisor_.shutdown(domain.uuid, config_.stop_grace);
    }
  });
}

std::pair<std::vector<KeyedMutex::Guard>, hypervisor::Domain> InstanceService::lock_existing(
    const ControllerId& controller, const InstanceRef& instance) {
  auto [locks, target] = lock_target(controller, instance);
  auto domain = locate(controller, target);
  if (!domain) {
    throw ServiceError(Code::not_found, "no instance " + instance.str());
  }
  return {std::move(locks), std::move(*domain)};
}

std::size_t InstanceService::remove_all(const ControllerId& controller) {
  return guarded("remove all instances", [&] {
    std::set<std::string> domain_names;
    const hypervisor::Tags filter{{tag::kAgent, config_.agent_id},
                                  {tag::kController, controller.str()}};
    for (const auto& domain : hypervisor_.list(filter)) {
      domain_names.insert(domain.name);
    }
    for (const auto& record : store_.list()) {
      if (record.controller_id == controller.str()) {
        domain_names.insert(record.domain_name);
      }
    }
    std::size_t removed = 0;
    std::vector<std::string> failures;
    for (const auto& name : domain_names) {
      try {
        auto lock = instance_locks_.lock(name);
        if (remove_locked(controller, Target{name, std::nullopt})) {
          ++removed;
        }
      } catch (const std::exception& e) {
        failures.push_back(name + ": " + e.what());
      }
    }
    if (!failures.empty()) {
      throw ServiceError(Code::internal, "removed " + std::to_string(removed) + " instances but " +
                                             std::to_string(failures.size()) +
                                             " failed; first: " + failures.front());
    }
    return removed;
  });
}

void InstanceService::teardown(const InstanceRecord& record) {
  guests_->revoke(record.domain_name);  // its seed and relay access end first
  hypervisor_.destroy(record.domain_uuid);
  hypervisor_.undefine(record.domain_uuid);
  if (record.guest) {
    // Only once no domain holds the address's MAC, which the next guest there gets too.
    guests_->release(*record.guest);
  }
  hypervisor_.delete_volume(record.volume_pool, record.volume_name);
  if (record.warm) {  // a saved one's memory, or what a restore could not delete
    hypervisor_.delete_volume(record.volume_pool, memory_volume_name_for(record.domain_name));
  }
  delete_cache_volumes(record);
  delete_scratch_volumes(record);
  store_.remove(record.domain_name);
}

}  // namespace garm_edge::agent
