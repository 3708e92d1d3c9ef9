#include "agent/instances/domain_view.hpp"
#include "agent/instances/identifiers.hpp"
#include "agent/instances/instance_service.hpp"

namespace garm_edge::agent {

std::optional<hypervisor::Domain> InstanceService::find_owned_domain(const ControllerId& controller,
                                                                     std::string_view domain_name) {
  auto domain = hypervisor_.find_by_name(domain_name);
  if (domain && owned_by(*domain, config_.agent_id, controller)) {
    return domain;
  }
  return std::nullopt;
}

InstanceService::Target InstanceService::resolve(const ControllerId& controller,
                                                 const InstanceRef& instance) {
  if (instance.may_be_provider_id()) {
    const auto& uuid = instance.str();
    if (auto domain = hypervisor_.find_by_uuid(uuid);
        domain && owned_by(*domain, config_.agent_id, controller)) {
      return Target{domain->name, uuid};
    }
    // The domain may be gone while its record (an unfinished delete) remains.
    for (const auto& record : store_.list()) {
      if (record.domain_uuid == uuid && record.controller_id == controller.str()) {
        return Target{record.domain_name, uuid};
      }
    }
  }
  return Target{domain_name_for(controller, instance.str()), std::nullopt};
}

std::optional<hypervisor::Domain> InstanceService::locate(const ControllerId& controller,
                                                          const Target& target) {
  auto domain = find_owned_domain(controller, target.domain_name);
  if (domain && target.uuid && domain->uuid != *target.uuid) {
    return std::nullopt;  // the name now belongs to a newer instance
  }
  return domain;
}

std::optional<wire::ProviderInstance> InstanceService::get(const ControllerId& controller,
                                                           const InstanceRef& instance) {
  return guarded("get " + instance.str(), [&]() -> std::optional<wire::ProviderInstance> {
    const auto domain = locate(controller, resolve(controller, instance));
    if (!domain) {
      return std::nullopt;
    }
    return describe(*domain);
  });
}

std::vector<wire::ProviderInstance> InstanceService::list(const ControllerId& controller,
                                                          const PoolId& pool) {
  return guarded("list pool " + pool.str(), [&] {
    const hypervisor::Tags filter{{tag::kAgent, config_.agent_id},
                                  {tag::kController, controller.str()},
                                  {tag::kPool, pool.str()}};
    std::vector<wire::ProviderInstance> instances;
    for (const auto& domain : hypervisor_.list(filter)) {
      instances.push_back(describe(domain));
    }
    std::sort(instances.begin(), instances.end(),
              [](const auto& a, const auto& b) { return a.name < b.name; });
    return instances;
  });
}

std::optional<GuestRecord> InstanceService::guest_status(const ControllerId& controller,
                                                         const InstanceRef& instance) {
  return guarded("guest status of " + instance.str(), [&]() -> std::optional<GuestRecord> {
    const auto target = resolve(controller, instance);
    const auto record = store_.get(target.domain_name);
    if (!record || record->controller_id != controller.str() || !record->guest ||
        (target.uuid && record->domain_uuid != *target.uuid)) {
      return std::nullopt;
    }
    auto guest = *record->guest;
    guest.seed_token_hash.clear();
    guest.bearer_token_hash.clear();
    guest.meta_data.clear();
    guest.user_data.clear();  // carries garm's instance token
    guest.vendor_data.clear();
    guest.ca_cert_bundle.clear();
    return guest;
  });
}

std::map<std::string, std::size_t> InstanceService::count_by_state() {
  std::map<std::string, std::size_t> counts;
  for (const auto& domain : hypervisor_.list({{tag::kAgent, config_.agent_id}})) {
    ++counts[std::string(hypervisor::to_string(domain.state))];
  }
  return counts;
}

hypervisor::HostCapacity InstanceService::capacity() {
  return hypervisor_.capacity();
}

hypervisor::HypervisorHealth InstanceService::health() {
  return hypervisor_.health();
}

}  // namespace garm_edge::agent
