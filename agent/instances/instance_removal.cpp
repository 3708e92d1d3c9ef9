#include <set>

#include "agent/instances/domain_view.hpp"
#include "agent/instances/instance_service.hpp"
#include "common/text.hpp"
#include "wire/validate.hpp"

namespace garm_edge::agent {
namespace {

using Code = ServiceError::Code;

}  // namespace

bool InstanceService::remove(std::string_view controller_id, std::string_view instance) {
  return guarded("delete " + printable_excerpt(instance), [&] {
    const auto target = resolve(controller_id, instance);
    if (!target) {
      return false;
    }
    auto lock = instance_locks_.lock(target->domain_name);
    return remove_locked(controller_id, *target);
  });
}

bool InstanceService::remove_locked(std::string_view controller_id, const Target& target) {
  auto record = store_.get(target.domain_name);
  if (record && (record->controller_id != controller_id ||
                 (target.uuid && record->domain_uuid != *target.uuid))) {
    record.reset();  // another controller's, or an older instance of this name
  }
  const auto domain = locate(controller_id, target);
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
  events_.record("destroyed", doomed.name, doomed.controller_id, "domain " + doomed.domain_name);
  return true;
}

void InstanceService::start(std::string_view controller_id, std::string_view instance) {
  guarded("start " + printable_excerpt(instance), [&] {
    const auto [lock, domain] = lock_existing(controller_id, instance);
    const auto record = store_.get(domain.name);
    if (record && record->intent == Intent::deleting) {
      throw ServiceError(Code::conflict, "instance " + record->name + " is being deleted");
    }
    hypervisor_.start(domain.uuid);
  });
}

void InstanceService::stop(std::string_view controller_id, std::string_view instance, bool force) {
  guarded("stop " + printable_excerpt(instance), [&] {
    const auto [lock, domain] = lock_existing(controller_id, instance);
    if (force) {
      hypervisor_.destroy(domain.uuid);
    } else {
      hypervisor_.shutdown(domain.uuid, config_.stop_grace);
    }
  });
}

std::pair<KeyedMutex::Guard, hypervisor::Domain> InstanceService::lock_existing(
    std::string_view controller_id, std::string_view instance) {
  const auto target = resolve(controller_id, instance);
  if (!target) {
    throw ServiceError(Code::not_found, "no instance " + printable_excerpt(instance));
  }
  auto lock = instance_locks_.lock(target->domain_name);
  auto domain = locate(controller_id, *target);
  if (!domain) {
    throw ServiceError(Code::not_found, "no instance " + printable_excerpt(instance));
  }
  return {std::move(lock), std::move(*domain)};
}

std::size_t InstanceService::remove_all(std::string_view controller_id) {
  return guarded("remove all instances", [&] {
    wire::validate_uuid(controller_id, "controller_id");
    std::set<std::string> domain_names;
    const hypervisor::Tags filter{{tag::kAgent, config_.agent_id},
                                  {tag::kController, std::string(controller_id)}};
    for (const auto& domain : hypervisor_.list(filter)) {
      domain_names.insert(domain.name);
    }
    for (const auto& record : store_.list()) {
      if (record.controller_id == controller_id) {
        domain_names.insert(record.domain_name);
      }
    }
    std::size_t removed = 0;
    std::vector<std::string> failures;
    for (const auto& name : domain_names) {
      try {
        auto lock = instance_locks_.lock(name);
        if (remove_locked(controller_id, Target{name, std::nullopt})) {
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
  store_.remove(record.domain_name);
}

}  // namespace garm_edge::agent
