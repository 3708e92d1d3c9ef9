#include "agent/instances/instance_service.hpp"

#include "agent/instances/domain_view.hpp"

namespace garm_edge::agent {

InstanceService::InstanceService(const AgentConfig& config, hypervisor::Hypervisor& hypervisor,
                                 InstanceStore& store, const Clock& clock, Logger& logger)
    : config_(config),
      hypervisor_(hypervisor),
      store_(store),
      clock_(clock),
      log_(logger),
      create_gate_(config.max_concurrent_creates),
      drain_(config.state_dir / "draining"),
      events_(clock, logger) {}

void InstanceService::serve_guests(GuestSide& guests) {
  guests_ = &guests;
  for (const auto& record : store_.list()) {
    if (record.intent == Intent::created) {  // reconcile removes the others
      guests.admit(record);
    }
  }
}

std::optional<InstanceRecord> InstanceService::update_guest(
    std::string_view domain_name, const std::function<bool(GuestRecord&)>& change) {
  auto lock = instance_locks_.lock(std::string(domain_name));
  auto record = store_.get(domain_name);
  if (!record || !record->guest || record->intent == Intent::deleting) {
    return std::nullopt;
  }
  if (change(*record->guest)) {
    store_.put(*record);
    guests_->admit(*record);
  }
  return record;
}

hypervisor::Tags InstanceService::tags_for(const InstanceRecord& record) const {
  return agent::tags_for(record, config_.agent_id, store_.state_id());
}

wire::ProviderInstance InstanceService::describe(const hypervisor::Domain& domain) const {
  return agent::describe(domain, guests_->view(domain.name));
}

}  // namespace garm_edge::agent
