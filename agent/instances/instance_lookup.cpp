#include "agent/instances/domain_view.hpp"
#include "agent/instances/identifiers.hpp"
#include "agent/instances/instance_service.hpp"
#include "common/text.hpp"
#include "wire/validate.hpp"

namespace garm_edge::agent {

std::optional<hypervisor::Domain> InstanceService::find_owned_domain(std::string_view controller_id,
                                                                     std::string_view domain_name) {
  auto domain = hypervisor_.find_by_name(domain_name);
  if (domain && owned_by(*domain, config_.agent_id, controller_id)) {
    return domain;
  }
  return std::nullopt;
}

std::optional<InstanceService::Target> InstanceService::resolve(std::string_view controller_id,
                                                                std::string_view instance) {
  wire::validate_uuid(controller_id, "controller_id");
  if (wire::is_uuid(instance)) {
    const std::string uuid(instance);
    if (auto domain = hypervisor_.find_by_uuid(uuid);
        domain && owned_by(*domain, config_.agent_id, controller_id)) {
      return Target{domain->name, uuid};
    }
    // The domain may be gone while its record (an unfinished delete) remains.
    for (const auto& record : store_.list()) {
      if (record.domain_uuid == uuid && record.controller_id == controller_id) {
        return Target{record.domain_name, uuid};
      }
    }
  }
  wire::validate_instance_name(instance, "instance");
  return Target{domain_name_for(controller_id, instance), std::nullopt};
}

std::optional<hypervisor::Domain> InstanceService::locate(std::string_view controller_id,
                                                          const Target& target) {
  auto domain = find_owned_domain(controller_id, target.domain_name);
  if (domain && target.uuid && domain->uuid != *target.uuid) {
    return std::nullopt;  // the name now belongs to a newer instance
  }
  return domain;
}

std::optional<wire::ProviderInstance> InstanceService::get(std::string_view controller_id,
                                                           std::string_view instance) {
  return guarded("get " + printable_excerpt(instance),
                 [&]() -> std::optional<wire::ProviderInstance> {
                   const auto target = resolve(controller_id, instance);
                   const auto domain = target ? locate(controller_id, *target) : std::nullopt;
                   if (!domain) {
                     return std::nullopt;
                   }
                   return describe(*domain);
                 });
}

std::vector<wire::ProviderInstance> InstanceService::list(std::string_view controller_id,
                                                          std::string_view pool_id) {
  return guarded("list pool " + printable_excerpt(pool_id), [&] {
    wire::validate_uuid(controller_id, "controller_id");
    wire::validate_pool_id(pool_id);
    const hypervisor::Tags filter{{tag::kAgent, config_.agent_id},
                                  {tag::kController, std::string(controller_id)},
                                  {tag::kPool, std::string(pool_id)}};
    std::vector<wire::ProviderInstance> instances;
    for (const auto& domain : hypervisor_.list(filter)) {
      instances.push_back(describe(domain));
    }
    std::sort(instances.begin(), instances.end(),
              [](const auto& a, const auto& b) { return a.name < b.name; });
    return instances;
  });
}

std::optional<GuestRecord> InstanceService::guest_status(std::string_view controller_id,
                                                         std::string_view instance) {
  return guarded("guest status of " + printable_excerpt(instance),
                 [&]() -> std::optional<GuestRecord> {
                   const auto target = resolve(controller_id, instance);
                   const auto record = target ? store_.get(target->domain_name) : std::nullopt;
                   if (!record || record->controller_id != controller_id || !record->guest ||
                       (target->uuid && record->domain_uuid != *target->uuid)) {
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

}  // namespace garm_edge::agent
