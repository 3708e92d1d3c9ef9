#include "agent/instances/domain_view.hpp"

#include "agent/instances/identifiers.hpp"

namespace garm_edge::agent {
namespace {

wire::InstanceStatus status_for(hypervisor::PowerState state) {
  switch (state) {
    case hypervisor::PowerState::running:
      return wire::InstanceStatus::running;
    case hypervisor::PowerState::shutoff:
      return wire::InstanceStatus::stopped;
    case hypervisor::PowerState::crashed:
      return wire::InstanceStatus::error;
    default:
      return wire::InstanceStatus::unknown;
  }
}

std::string tag_or_empty(const hypervisor::Tags& tags, const char* key) {
  return std::string(tags.get(key).value_or(""));
}

}  // namespace

hypervisor::Tags tags_for(const InstanceRecord& r, std::string_view agent_id,
                          std::string_view state_id) {
  auto tags = hypervisor::Tags{
      {tag::kAgent, std::string(agent_id)},
      {tag::kController, r.controller_id},
      {tag::kPool, r.pool_id},
      {tag::kName, r.name},
      {tag::kOsType, std::string(wire::to_string(r.os_type))},
      {tag::kOsName, r.os_name},
      {tag::kOsVersion, r.os_version},
      {tag::kOsArch, std::string(wire::to_string(r.os_arch))},
      {tag::kImage, r.image},
      {tag::kFlavor, r.flavor},
      {tag::kCreatedAt, r.created_at},
      {tag::kStateId, std::string(state_id)},
  };
  if (r.warm) {
    tags.set(tag::kWarmController, r.warm->controller);
    if (r.warm->state == WarmState::saving || r.warm->state == WarmState::saved) {
      tags.set(tag::kWarmSaved, "1");
    }
  }
  return tags;
}

bool owned_by(const hypervisor::Domain& domain, std::string_view agent_id,
              std::string_view controller_id) {
  return domain.tags.get(tag::kAgent) == std::optional<std::string_view>(agent_id) &&
         domain.tags.get(tag::kController) == std::optional<std::string_view>(controller_id);
}

wire::ProviderInstance describe(const hypervisor::Domain& domain,
                                const std::optional<GuestView>& guest) {
  wire::ProviderInstance instance;
  instance.provider_id = domain.uuid;
  instance.name = tag_or_empty(domain.tags, tag::kName);
  instance.os_type = wire::parse_enum<wire::OsType>(tag_or_empty(domain.tags, tag::kOsType));
  instance.os_name = tag_or_empty(domain.tags, tag::kOsName);
  instance.os_version = tag_or_empty(domain.tags, tag::kOsVersion);
  instance.os_arch = wire::parse_enum<wire::OsArch>(tag_or_empty(domain.tags, tag::kOsArch));
  instance.status = status_for(domain.state);
  if (guest && !guest->ip.empty()) {
    // The reserved address: known without reading leases, and what the guest must use.
    instance.addresses.push_back(
        {.address = guest->ip, .type = wire::AddressType::private_address});
  } else {
    for (const auto& address : domain.addresses) {
      instance.addresses.push_back(
          {.address = address.ip, .type = wire::AddressType::private_address});
    }
  }
  if (guest) {
    instance.os_name = guest->os_name.empty() ? instance.os_name : guest->os_name;
    instance.os_version = guest->os_version.empty() ? instance.os_version : guest->os_version;
    if (guest->runner_status == "failed") {
      instance.provider_fault = "runner install failed: " + guest->last_message;
    }
  }
  return instance;
}

InstanceRecord record_for_orphan(const hypervisor::Domain& domain,
                                 const std::string& storage_pool) {
  InstanceRecord record;
  record.domain_name = domain.name;
  record.domain_uuid = domain.uuid;
  record.controller_id = tag_or_empty(domain.tags, tag::kController);
  record.pool_id = tag_or_empty(domain.tags, tag::kPool);
  record.name = tag_or_empty(domain.tags, tag::kName);
  record.volume_pool = storage_pool;
  record.volume_name = volume_name_for(domain.name);
  record.intent = Intent::deleting;
  return record;
}

}  // namespace garm_edge::agent
