#include "agent/instances/instance_service.hpp"

#include <algorithm>

#include "agent/instances/domain_view.hpp"
#include "agent/instances/warm_spec.hpp"

namespace garm_edge::agent {
namespace {

/// The controllers whose event history is never evicted: the configured ones, the warm pool's
/// and the host's own.
EventLog::Limits event_limits(const AgentConfig& config) {
  EventLog::Limits limits;
  limits.named = {std::string(kWarmControllerId), std::string(kCacheBuilderControllerId), ""};
  for (const auto& client : config.api.clients) {
    for (const auto& controller : client.controllers) {
      if (controller != "*") {
        limits.named.insert(controller);
      }
    }
  }
  return limits;
}

}  // namespace

InstanceService::InstanceService(const AgentConfig& config, hypervisor::Hypervisor& hypervisor,
                                 InstanceStore& store, const Clock& clock, Logger& logger)
    : config_(config),
      hypervisor_(hypervisor),
      store_(store),
      clock_(clock),
      log_(logger),
      create_gate_(config.max_concurrent_creates),
      drain_(config.state_dir / "draining"),
      events_(clock, logger, event_limits(config)),
      startup_(clock, {.bootstrap_timeout = config.startup_timeout}) {}

void InstanceService::use_image_bases(ImageBases& images) {
  images_ = &images;
}

bool InstanceService::base_in_use(const std::string& base_path) {
  const auto records = store_.list();
  return std::any_of(records.begin(), records.end(), [&](const InstanceRecord& record) {
    // A record from before base_path was kept: any base of a pulled image may be its.
    return record.base_path == base_path ||
           (record.base_path.empty() && images_ != nullptr && images_->pulls(record.image));
  });
}

void InstanceService::serve_guests(GuestSide& guests) {
  guests_ = &guests;
  for (const auto& record : store_.list()) {
    if (record.intent == Intent::created) {  // reconcile removes the others
      guests.admit(record);
    }
  }
}

void InstanceService::update_guest(std::string_view domain_name,
                                   std::function<bool(GuestRecord&)> change,
                                   std::function<void(const InstanceRecord&)> recorded) {
  const std::string name(domain_name);
  instance_locks_.run_or_defer(
      name, [this, name, change = std::move(change), recorded = std::move(recorded)] {
        auto record = store_.get(name);
        if (!record || !record->guest || record->intent == Intent::deleting ||
            !change(*record->guest)) {
          return;
        }
        store_.put(*record);
        guests_->admit(*record);
        if (recorded) {
          recorded(*record);
        }
      });
}

hypervisor::Tags InstanceService::tags_for(const InstanceRecord& record) const {
  return agent::tags_for(record, config_.agent_id, store_.state_id());
}

wire::ProviderInstance InstanceService::describe(const hypervisor::Domain& domain) const {
  return agent::describe(domain, guests_->view(domain.name));
}

}  // namespace garm_edge::agent

namespace garm_edge::agent {

void InstanceService::record_startup_report(const InstanceRecord& record, std::string_view status) {
  const auto& domain = record.domain_name;
  startup_.mark(domain, StartupPhase::first_status);
  if (status == "failed") {
    startup_.fail(domain, StartupFailure::guest_error);
  } else if (status == "idle") {
    if (const auto finished = startup_.mark(domain, StartupPhase::idle)) {
      events_.record("startup", record.name, record.controller_id, finished->summary());
    }
  }
}

}  // namespace garm_edge::agent
