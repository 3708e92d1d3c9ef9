#include <algorithm>

#include "agent/instances/domain_view.hpp"
#include "agent/instances/identifiers.hpp"
#include "agent/instances/instance_service.hpp"
#include "agent/instances/warm_spec.hpp"

namespace garm_edge::agent {
namespace {

std::map<std::string, std::size_t> counts_by_state(const std::vector<hypervisor::Domain>& domains) {
  std::map<std::string, std::size_t> counts;
  for (const auto& domain : domains) {
    ++counts[std::string(hypervisor::to_string(domain.state))];
  }
  return counts;
}

std::optional<std::uint64_t> number_tag(const hypervisor::Domain& domain, const char* key) {
  const auto text = domain.tags.get(key);
  if (!text || text->empty() || text->size() > 12 ||
      text->find_first_not_of("0123456789") != std::string_view::npos) {
    return std::nullopt;
  }
  return std::stoull(std::string(*text));
}

/// The flavor a domain created before its resources were tagged is counted as: the one of its
/// name now, or else the largest configured (an unknown one is never counted as free).
const FlavorConfig* flavor_to_count(const hypervisor::Domain& domain, const AgentConfig& config) {
  if (const auto* named = config.find_flavor(domain.tags.get(tag::kFlavor).value_or(""))) {
    return named;
  }
  const auto largest = std::max_element(
      config.flavors.begin(), config.flavors.end(),
      [](const FlavorConfig& a, const FlavorConfig& b) { return a.memory_mib < b.memory_mib; });
  return largest == config.flavors.end() ? nullptr : &*largest;
}

Resources running_resources_of(const hypervisor::Domain& domain, const AgentConfig& config) {
  const auto* flavor = flavor_to_count(domain, config);
  return Resources{
      .vcpus = number_tag(domain, tag::kVcpus).value_or(flavor != nullptr ? flavor->vcpus : 1),
      .memory_mib =
          number_tag(domain, tag::kMemoryMib).value_or(flavor != nullptr ? flavor->memory_mib : 0),
      .instances = 1,
      .disk_gib =
          number_tag(domain, tag::kDiskGib).value_or(flavor != nullptr ? flavor->disk_gib : 0),
  };
}

Resources resources_of(const hypervisor::Domain& domain, const AgentConfig& config) {
  auto resources = running_resources_of(domain, config);
  if (domain.tags.get(tag::kWarmSaved) && domain.state == hypervisor::PowerState::shutoff) {
    // Its memory is a file on the storage pool's disk, at most the flavor's memory in size.
    resources.disk_gib += (resources.memory_mib + 1023) / 1024;
    resources.vcpus = 0;
    resources.memory_mib = 0;
  }
  return resources;
}

/// The controller a domain counts for: a warm guest's, the one it is kept for.
std::string owner_of(const hypervisor::Domain& domain) {
  auto controller = std::string(domain.tags.get(tag::kController).value_or(""));
  if (controller == kWarmControllerId) {
    return std::string(domain.tags.get(tag::kWarmController).value_or(""));
  }
  return controller;
}

}  // namespace

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
  auto canonical = domain_name_for(controller, instance.str());
  if (!store_.contains(canonical)) {  // a lookup, not a read: GetInstance's hot path
    if (auto bound = find_bound(controller, instance.str())) {
      return Target{bound->name, std::nullopt};
    }
  }
  return Target{std::move(canonical), std::nullopt};
}

std::pair<std::vector<KeyedMutex::Guard>, InstanceService::Target> InstanceService::lock_target(
    const ControllerId& controller, const InstanceRef& instance) {
  std::vector<KeyedMutex::Guard> guards;
  const auto canonical = domain_name_for(controller, instance.str());
  guards.push_back(instance_locks_.lock(canonical));
  auto target = resolve(controller, instance);
  if (target.domain_name != canonical) {
    guards.push_back(instance_locks_.lock(target.domain_name));
  }
  return {std::move(guards), std::move(target)};
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

std::optional<StartupTimeline> InstanceService::startup_timeline(const ControllerId& controller,
                                                                 const InstanceRef& instance) {
  return guarded("start-up of " + instance.str(), [&]() -> std::optional<StartupTimeline> {
    auto timeline = startup_.timeline(resolve(controller, instance).domain_name);
    if (!timeline || timeline->controller != controller.str()) {
      return std::nullopt;
    }
    return timeline;
  });
}

std::map<std::string, std::size_t> InstanceService::count_by_state() {
  return counts_by_state(hypervisor_.list({{tag::kAgent, config_.agent_id}}));
}

std::vector<InstanceResources> InstanceService::resources_of(
    const std::vector<hypervisor::Domain>& domains) const {
  std::vector<InstanceResources> resources;
  resources.reserve(domains.size());
  for (const auto& domain : domains) {
    resources.push_back({domain.name, owner_of(domain), agent::resources_of(domain, config_)});
  }
  return resources;
}

Resources InstanceService::running_resources_of(const hypervisor::Domain& domain) const {
  return agent::running_resources_of(domain, config_);
}

std::vector<InstanceResources> InstanceService::resources_of_agent_domains() {
  return resources_of(hypervisor_.list({{tag::kAgent, config_.agent_id}}));
}

bool InstanceService::create_under_way(const ControllerId& controller,
                                       const std::string& name) const {
  return capacity_ledger_.under_way(domain_name_for(controller.str(), name));
}

CapacityReport InstanceService::capacity() {
  return guarded("read capacity", [&] {
    CapacityReport report;
    report.host = hypervisor_.capacity();
    report.addresses = guests_->addresses();
    report.limit =
        limit_within_addresses(limits_of(report.host, config_.capacity), report.addresses);
    // Creates under way before the domains: a create holds its place until its domain is
    // defined, so one that ends between the two readings is in the second.
    const auto under_way = capacity_ledger_.under_way();
    const auto domains = hypervisor_.list({{tag::kAgent, config_.agent_id}});
    report.usage = capacity_ledger_.usage(resources_of(domains));
    report.used = report.usage.total;
    report.free = room_of(report.used, report.limit, report.addresses);
    report.by_state = counts_by_state(domains);
    report.draining = draining();
    report.warm = warm_counts();
    for (const auto& domain : domains) {
      report.instances.emplace_back(domain.tags.get(tag::kController).value_or(""),
                                    domain.tags.get(tag::kName).value_or(""));
    }
    for (const auto& domain_name : under_way) {
      if (auto instance = instance_of_domain_name(domain_name)) {
        report.instances.push_back(std::move(*instance));
      }
    }
    return report;
  });
}

void InstanceService::set_draining(bool draining) {
  if (!draining && config_.draining) {
    throw ServiceError(ServiceError::Code::conflict,
                       "draining = true in agent.toml: change it there and restart the agent");
  }
  try {
    drain_.set(draining);
  } catch (const std::exception& e) {
    throw ServiceError(ServiceError::Code::internal,
                       std::string("cannot keep the draining switch: ") + e.what());
  }
  events_.record(draining ? "draining" : "undrained", "", "",
                 draining ? "takes no new instances" : "takes new instances again");
}

bool InstanceService::draining() const {
  return config_.draining || drain_.on();
}

hypervisor::HypervisorHealth InstanceService::health() {
  return hypervisor_.health();
}

}  // namespace garm_edge::agent
