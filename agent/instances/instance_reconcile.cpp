#include <algorithm>
#include <set>

#include "agent/instances/domain_view.hpp"
#include "agent/instances/identifiers.hpp"
#include "agent/instances/instance_service.hpp"
#include "common/text.hpp"

namespace garm_edge::agent {

void InstanceService::report_unreadable(const std::vector<std::string>& unreadable) {
  std::lock_guard lock(unreadable_mutex_);
  if (unreadable == reported_unreadable_) {
    return;  // said once; the next pass says it again only if the set changes
  }
  reported_unreadable_ = unreadable;
  if (unreadable.empty()) {
    log_.info("reconcile: every instance record is readable again");
    return;
  }
  constexpr std::size_t kNamed = 5;
  std::string names;
  for (std::size_t i = 0; i < std::min(unreadable.size(), kNamed); ++i) {
    names += (names.empty() ? "" : ", ") + printable_excerpt(unreadable[i], 160) + ".json";
  }
  if (unreadable.size() > kNamed) {
    names += " and " + std::to_string(unreadable.size() - kNamed) + " more";
  }
  log_.error("reconcile: unreadable instance records in the state directory (" + names +
             "): their domains, overlays and addresses are left alone" +
             (guests_->enabled() ? " and no address reservation is released" : "") +
             " until each file is repaired or removed");
}

ReconcileReport InstanceService::reconcile() {
  // The loop's pass and an operator's `reconcile` take turns: no domain is removed twice.
  const std::lock_guard one_pass_at_a_time(reconcile_mutex_);
  ReconcileReport report;
  try {
    reconcile_records(report);
    reconcile_domains(report);
    reconcile_volumes(report);
    const auto unreadable = store_.unreadable();
    report_unreadable(unreadable);
    // An unreadable record may hold a running guest's address: releasing "unheld" reservations
    // could hand it to a second guest.
    if (unreadable.empty()) {
      release_unheld_addresses(report);
    }
  } catch (const std::exception& e) {
    ++report.failures;
    log_.error(std::string("reconcile pass stopped: ") + e.what());
  }
  return report;
}

void InstanceService::run_if_idle(const std::string& domain_name, ReconcileReport& report,
                                  const std::function<void()>& action) {
  auto lock = instance_locks_.try_lock(domain_name);
  if (!lock) {
    ++report.busy;
    return;
  }
  try {
    action();
  } catch (const std::exception& e) {
    ++report.failures;
    log_.error("reconcile " + domain_name + ": " + e.what());
  }
}

void InstanceService::reconcile_records(ReconcileReport& report) {
  for (const auto& listed : store_.list()) {
    run_if_idle(listed.domain_name, report, [&] {
      if (const auto record = store_.get(listed.domain_name)) {  // as it is under the lock
        reconcile_record(*record, report);
      }
    });
  }
}

void InstanceService::reconcile_domains(ReconcileReport& report) {
  for (const auto& domain : hypervisor_.list({{tag::kAgent, config_.agent_id}})) {
    run_if_idle(domain.name, report, [&] {
      if (!store_.get(domain.name)) {
        reconcile_domain(domain, report);
      }
    });
  }
}

void InstanceService::reconcile_volumes(ReconcileReport& report) {
  std::set<std::string> pools{config_.storage_pool};
  for (const auto& scratch : config_.scratch_pools) {
    pools.insert(scratch.storage_pool);
  }
  for (const auto& pool : pools) {
    for (const auto& volume : hypervisor_.list_volumes(pool)) {
      if (const auto domain_name = domain_name_of_volume(volume)) {
        run_if_idle(*domain_name, report,
                    [&] { reconcile_volume(pool, volume, *domain_name, report); });
      }
    }
  }
}

void InstanceService::release_unheld_addresses(ReconcileReport& report) {
  report.orphan_reservations += guests_->release_unheld([&] {
    std::set<std::string> recorded;  // also those whose teardown is unfinished
    for (const auto& record : store_.list()) {
      if (record.guest && !record.guest->ip.empty()) {
        recorded.insert(record.guest->ip);
      }
    }
    return recorded;
  });
}

void InstanceService::reconcile_record(const InstanceRecord& record, ReconcileReport& report) {
  switch (record.intent) {
    case Intent::creating:
      teardown(record);
      ++report.rolled_back_creates;
      log_.warning("reconcile: rolled back the interrupted create of " + record.name);
      return;
    case Intent::deleting:
      teardown(record);
      ++report.finished_deletes;
      log_.info("reconcile: finished the interrupted delete of " + record.name);
      return;
    case Intent::created: {
      const auto domain = hypervisor_.find_by_uuid(record.domain_uuid);
      if (!domain) {
        teardown(record);
        ++report.vanished_domains;
        log_.warning("reconcile: domain of " + record.name +
                     " disappeared; removed its overlay volume and record");
      } else if (record.warm &&
                 (!owned_by(*domain, config_.agent_id, record.controller_id) ||
                  domain->tags.get(tag::kName) != std::optional<std::string_view>(record.name))) {
        // The agent stopped between recording a binding (or its undoing) and tagging the
        // domain: the record is the truth.
        hypervisor_.set_tags(domain->uuid, bound_tags(record, *domain));
        log_.warning("reconcile: tagged warm guest " + record.domain_name + " as " + record.name +
                     ", as its record says");
      }
      return;
    }
  }
}

void InstanceService::reconcile_domain(const hypervisor::Domain& domain, ReconcileReport& report) {
  if (domain.tags.get(tag::kStateId) != std::optional<std::string_view>(store_.state_id())) {
    // Made by this agent with another state directory (wiped, replaced, not mounted): its
    // record may still exist somewhere, so it is garm's to delete, not ours to guess about.
    ++report.other_state;
    log_.warning("reconcile: domain " + domain.name +
                 " carries this agent's tag but another state directory's ID; left alone");
    return;
  }
  teardown(record_for_orphan(domain, config_.storage_pool));
  ++report.orphan_domains;
  log_.warning("reconcile: removed domain " + domain.name +
               ", which carried this agent's tag but had no record");
}

void InstanceService::reconcile_volume(const std::string& pool, const std::string& volume_name,
                                       const std::string& domain_name, ReconcileReport& report) {
  if (store_.get(domain_name) || hypervisor_.find_by_name(domain_name)) {
    return;
  }
  // A create's overlay whose record was already rolled back: e.g. a volume call that
  // finished after its deadline had passed.
  hypervisor_.delete_volume(pool, volume_name);
  ++report.orphan_volumes;
  log_.warning("reconcile: removed overlay volume " + volume_name + ", which no instance uses");
}

}  // namespace garm_edge::agent
