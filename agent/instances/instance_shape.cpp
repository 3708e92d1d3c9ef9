// A pool's shape beyond its flavor (docs/extra-specs.md): root disk size, scratch disks,
// further NICs, nested virtualization and the virt type, checked against the operator's
// limits before anything is made.
#include "agent/instances/identifiers.hpp"
#include "agent/instances/instance_service.hpp"
#include "wire/pool_shape.hpp"
#include "wire/schemas.hpp"

namespace garm_edge::agent {
namespace {

using Code = ServiceError::Code;

[[noreturn]] void refuse(const std::string& message) {
  throw ServiceError(Code::invalid_argument, message);
}

std::uint64_t root_disk_gib(const wire::PoolShape& shape, const FlavorConfig& flavor,
                            const ExtraSpecLimits& limits) {
  if (!shape.root_disk_gib || *shape.root_disk_gib == flavor.disk_gib) {
    return flavor.disk_gib;
  }
  const auto wanted = *shape.root_disk_gib;
  if (wanted < flavor.disk_gib) {
    refuse("extra_specs.root_disk_gib: " + std::to_string(wanted) + " GiB is smaller than flavor " +
           flavor.name + "'s " + std::to_string(flavor.disk_gib) +
           " GiB disk (a pool may grow its root disk, not shrink it)");
  }
  if (wanted > limits.max_root_disk_gib) {
    refuse("extra_specs.root_disk_gib: " + std::to_string(wanted) +
           " GiB is more than this agent allows (" +
           (limits.max_root_disk_gib == 0 ? std::string("none larger than the flavor's")
                                          : std::to_string(limits.max_root_disk_gib) + " GiB") +
           ", [extra_specs] max_root_disk_gib)");
  }
  return wanted;
}

std::string arch_name(hypervisor::GuestArch arch) {
  return std::string(hypervisor::to_string(arch));
}

}  // namespace

void InstanceService::plan_shape(CreatePlan& plan, const wire::BootstrapInstance& bootstrap,
                                 const FlavorConfig& flavor) {
  // Keys the schema does not publish are refused here as at pool validation: a typo must not
  // be ignored at the create while validation refuses it.
  if (bootstrap.extra_specs) {
    wire::validate_extra_spec_keys(*bootstrap.extra_specs);
  }
  plan.shape = wire::parse_pool_shape(bootstrap.extra_specs);
  const auto& shape = plan.shape;
  auto& record = plan.record;
  const auto root_gib = root_disk_gib(shape, flavor, config_.extra_specs);
  plan.volume.capacity_bytes = root_gib << 30U;
  if (root_gib != flavor.disk_gib) {
    record.root_disk_gib = root_gib;
  }
  plan.resources.disk_gib = root_gib;
  plan_scratch_disks(plan);
  plan_extra_nics(plan);
  check_hypervisor_shape(plan);
  plan.domain.nested_virtualization = shape.nested_virtualization;
  plan.domain.emulated = shape.virt_type == wire::VirtTypeRequest::qemu;
}

void InstanceService::plan_scratch_disks(CreatePlan& plan) {
  auto& record = plan.record;
  if (!plan.shape.scratch_disks.empty() && record.os_type != wire::OsType::linux) {
    refuse("extra_specs.scratch_disks: only Linux guests format and mount scratch disks");
  }
  for (const auto& wanted : plan.shape.scratch_disks) {
    const auto* pool = config_.find_scratch_pool(wanted.pool);
    // The same answer for another controller's pool as for none: names are not disclosed.
    if (pool == nullptr || !pool->scope.serves(record.controller_id)) {
      refuse("extra_specs.scratch_disks: this agent has no scratch pool \"" + wanted.pool + "\"");
    }
    if (wanted.size_gib > pool->max_disk_gib) {
      refuse("extra_specs.scratch_disks: " + std::to_string(wanted.size_gib) +
             " GiB is more than scratch pool " + pool->name + " allows (" +
             std::to_string(pool->max_disk_gib) + " GiB, max_disk_gib)");
    }
    const auto index = record.scratch_disks.size();
    ScratchDiskRecord disk{.pool = pool->name,
                           .storage_pool = pool->storage_pool,
                           .volume_name = scratch_volume_name_for(record.domain_name, index),
                           .size_gib = wanted.size_gib,
                           .serial = "garm-scratch-" + std::to_string(index),
                           .mount = wanted.mount};
    plan.scratch_volumes.push_back({.pool = disk.storage_pool,
                                    .name = disk.volume_name,
                                    .capacity_bytes = wanted.size_gib << 30U,
                                    .backing_path = "",
                                    .backing_format = "qcow2"});
    plan.resources.disk_gib += wanted.size_gib;
    record.scratch_disks.push_back(std::move(disk));
  }
}

void InstanceService::plan_extra_nics(CreatePlan& plan) {
  auto& record = plan.record;
  for (const auto& name : plan.shape.networks) {
    const auto* network = config_.find_network(name);
    if (network == nullptr || !network->scope.serves(record.controller_id)) {
      refuse("extra_specs.networks: this agent has no network \"" + name + "\"");
    }
    record.extra_nics.push_back({.network = network->name, .mac = random_mac()});
    plan.extra_interfaces.push_back({.network = network->network,
                                     .bridge = network->bridge,
                                     .mac = record.extra_nics.back().mac,
                                     .filter = "",
                                     .filter_ip = ""});
  }
}

void InstanceService::check_hypervisor_shape(const CreatePlan& plan) {
  const auto& shape = plan.shape;
  if (!shape.nested_virtualization && shape.virt_type != wire::VirtTypeRequest::kvm) {
    return;  // nothing the host must offer
  }
  const auto arch = plan.domain.arch;
  const auto host = hypervisor_.capacity();
  const auto type = host.virt_types.find(arch);
  // The test driver stands in for any hypervisor.
  const bool kvm = type != host.virt_types.end() && (type->second == hypervisor::VirtType::kvm ||
                                                     type->second == hypervisor::VirtType::test);
  if (shape.virt_type == wire::VirtTypeRequest::kvm && !kvm) {
    refuse("extra_specs.virt_type: agent " + config_.agent_id + " has no KVM for " +
           arch_name(arch) + " guests (it emulates them)");
  }
  if (!shape.nested_virtualization) {
    return;
  }
  if (shape.virt_type == wire::VirtTypeRequest::qemu) {
    refuse("extra_specs.nested_virtualization: needs KVM, and virt_type asks for emulation");
  }
  if (!config_.extra_specs.nested_virtualization) {
    refuse("extra_specs.nested_virtualization: agent " + config_.agent_id +
           " does not allow it ([extra_specs] nested_virtualization)");
  }
  if (!kvm || !host.nested_virtualization) {
    refuse("extra_specs.nested_virtualization: agent " + config_.agent_id + " cannot offer it to " +
           arch_name(arch) + " guests (" +
           (kvm ? "its kvm module has nested off" : "it has no KVM for them") + ")");
  }
}

void InstanceService::create_scratch_volumes(CreatePlan& plan) {
  for (std::size_t i = 0; i < plan.scratch_volumes.size(); ++i) {
    const auto volume = hypervisor_.create_overlay(plan.scratch_volumes[i]);
    plan.domain.extra_disks.push_back(
        {.path = volume.path, .format = "qcow2", .serial = plan.record.scratch_disks[i].serial});
  }
}

void InstanceService::delete_scratch_volumes(const InstanceRecord& record) {
  for (const auto& disk : record.scratch_disks) {
    hypervisor_.delete_volume(disk.storage_pool, disk.volume_name);
  }
}

}  // namespace garm_edge::agent
