#include "agent/instances/domain_view.hpp"
#include "agent/instances/identifiers.hpp"
#include "agent/instances/instance_service.hpp"
#include "common/text.hpp"
#include "hypervisor/domain_xml.hpp"
#include "wire/pool_shape.hpp"
#include "wire/validate.hpp"

namespace garm_edge::agent {
namespace {

using Code = ServiceError::Code;

hypervisor::GuestArch guest_arch_for(wire::OsArch arch) {
  switch (arch) {
    case wire::OsArch::arm64:
      return hypervisor::GuestArch::aarch64;
    case wire::OsArch::arm:
      return hypervisor::GuestArch::armv7l;
    default:
      return hypervisor::GuestArch::x86_64;
  }
}

template <class Named>
std::string names_of(const std::vector<Named>& items) {
  std::string names;
  for (const auto& item : items) {
    names += (names.empty() ? "" : ", ") + item.name;
  }
  return names;
}

}  // namespace

wire::ProviderInstance InstanceService::create(const ControllerId& controller,
                                               const wire::BootstrapInstance& bootstrap,
                                               WarmUse warm_use) {
  return create_as(controller, bootstrap, nullptr, warm_use);
}

wire::ProviderInstance InstanceService::create_as(const ControllerId& controller,
                                                  const wire::BootstrapInstance& bootstrap,
                                                  const WarmRecord* warm, WarmUse warm_use) {
  try {
    const auto began = deletes_.now();
    const auto received = clock_.now();
    return guarded("create " + printable_excerpt(bootstrap.name), [&] {
      auto plan = plan_create(controller, bootstrap);
      auto lock = instance_locks_.lock(plan.record.domain_name);
      if (deletes_.deleted_since(plan.record.domain_name, began)) {
        // garm gave up on this create and deleted the name before the create got here.
        throw ServiceError(Code::conflict, "instance " + plan.record.name +
                                               " was deleted while it was being created");
      }
      if (warm != nullptr) {
        plan.record.warm = *warm;
        // On the domain too, as tags_for(record) puts it: the owner is seen without our records.
        plan.domain.tags.set(tag::kWarmController, warm->controller);
        // A saved one is restored with a new generation ID: its kernel reseeds its CRNG.
        plan.domain.generation_id = true;
        if (plan.guest && plan.guest->record.runner_archive) {
          plan.record.warm->unpacked_sha256 = plan.guest->record.runner_archive->sha256;
        }
      } else {
        if (auto bound = find_bound(controller, plan.record.name)) {
          // garm's retry of a create that took a warm guest.
          auto bound_lock = instance_locks_.lock(bound->name);
          if (bound->state == hypervisor::PowerState::running) {
            return describe(*bound);
          }
          remove_locked(controller, Target{bound->name, std::nullopt});
        }
      }
      if (auto existing = reuse_existing(plan)) {
        return *existing;
      }
      if (warm == nullptr) {
        if (auto bound = bind_warm(bootstrap, plan)) {
          remember_tool(controller, bootstrap);
          return *bound;
        }
        if (warm_use == WarmUse::only) {
          throw ServiceError(Code::no_capacity, "no warm guest of image " + plan.record.image +
                                                    " and flavor " + plan.record.flavor +
                                                    " is ready");
        }
      }
      const auto hold = admit_create(plan);
      if (warm == nullptr) {
        // Timed from the moment garm asked; a create refused before here is no start.
        startup_.begin(plan.record.domain_name, plan.record.name, plan.record.controller_id,
                       {.pool = plan.record.pool_id,
                        .image = plan.record.image,
                        .flavor = plan.record.flavor,
                        .warm = false},
                       received);
      }
      events_.record("creating", plan.record.name, plan.record.controller_id,
                     "image " + plan.record.image + ", flavor " + plan.record.flavor);
      auto slot = create_gate_.acquire();
      auto created = run_create(plan);
      if (warm == nullptr) {
        remember_tool(controller, bootstrap);  // only now: a create that failed chooses nothing
      }
      return created;
    });
  } catch (const ServiceError& e) {
    // Every failed create leaves one line, refusals before any libvirt step included.
    const bool agent_fault = e.code() != Code::invalid_argument && e.code() != Code::conflict &&
                             e.code() != Code::no_capacity && e.code() != Code::draining;
    // The warm pool asks every 5 s while the host is full: no line a minute for nothing.
    const bool warm_waits = warm != nullptr && !agent_fault;
    log_.log(agent_fault ? Level::error : warm_waits ? Level::debug : Level::warning, e.what());
    throw;
  }
}

DryRunResult InstanceService::dry_run_create(const ControllerId& controller,
                                             const wire::BootstrapInstance& bootstrap) {
  return guarded("dry run of " + printable_excerpt(bootstrap.name), [&] {
    auto plan = plan_create(controller, bootstrap);
    plan.domain.disk_path = hypervisor_.pool_path(plan.volume.pool) + "/" + plan.volume.name;
    for (std::size_t i = 0; i < plan.cache_volumes.size(); ++i) {
      plan.domain.extra_disks.push_back(
          {.path = hypervisor_.pool_path(plan.volume.pool) + "/" + plan.cache_volumes[i].name,
           .format = "qcow2",
           .serial = plan.record.caches[i].serial});
    }
    for (std::size_t i = 0; i < plan.scratch_volumes.size(); ++i) {
      const auto& disk = plan.record.scratch_disks[i];
      plan.domain.extra_disks.push_back(
          {.path = hypervisor_.pool_path(disk.storage_pool) + "/" + disk.volume_name,
           .format = "qcow2",
           .serial = disk.serial});
    }
    const auto existing = find_owned_domain(controller, plan.record.domain_name);
    DryRunResult result;
    result.already_exists = existing.has_value();
    result.domain_name = plan.record.domain_name;
    result.domain_xml = hypervisor_.domain_xml(plan.domain);
    result.volume_xml = render_overlay_volume_xml(plan.volume);
    if (plan.guest) {
      result.user_data = plan.guest->record.user_data;
    }
    hypervisor::Domain would_be{.name = plan.record.domain_name,
                                .uuid = plan.record.domain_uuid,
                                .state = hypervisor::PowerState::running,
                                .tags = plan.domain.tags,
                                .addresses = {}};
    result.instance = describe(existing ? *existing : would_be);
    return result;
  });
}

InstanceService::CreatePlan InstanceService::plan_create(const ControllerId& controller,
                                                         const wire::BootstrapInstance& b) {
  wire::validate_bootstrap(b);
  const auto [image, flavor] = fit_pool(b.image, b.flavor, b.os_type, b.arch);

  CreatePlan plan;
  auto& r = plan.record;
  r.domain_name = domain_name_for(controller, b.name);
  r.domain_uuid = random_uuid();
  r.controller_id = controller.str();
  r.pool_id = b.pool_id;
  r.name = b.name;
  r.image = image->name;
  r.flavor = flavor->name;
  r.os_type = image->os_type;
  r.os_name = image->os_name;
  r.os_version = image->os_version;
  r.os_arch = image->arch;
  r.volume_pool = config_.storage_pool;
  r.volume_name = volume_name_for(r.domain_name);
  r.created_at = format_rfc3339(clock_.now());
  r.intent = Intent::creating;
  const auto base = base_image(*image);
  r.base_path = base.path;

  plan.volume = hypervisor::VolumeSpec{
      .pool = r.volume_pool,
      .name = r.volume_name,
      .capacity_bytes = flavor->disk_gib << 30U,
      .backing_path = base.path,
      .backing_format = base.format,
  };
  plan.domain.name = r.domain_name;
  plan.domain.uuid = r.domain_uuid;
  plan.domain.arch = guest_arch_for(image->arch);
  plan.domain.vcpus = flavor->vcpus;
  plan.domain.memory_mib = flavor->memory_mib;
  plan.resources = {.vcpus = flavor->vcpus, .memory_mib = flavor->memory_mib, .instances = 1};
  plan.priority = wire::parse_priority(b.extra_specs);
  plan_shape(plan, b, *flavor);
  plan_caches(plan, b);  // before the guest's seed, which mounts them
  plan.guest = guests_->plan(r, b);
  if (plan.guest) {
    plan.domain.smbios_serial = plan.guest->smbios_serial;
    plan.domain.interfaces = {plan.guest->interface};  // the filter follows with the address
  } else if (!config_.network.empty()) {
    plan.domain.interfaces.push_back(
        {.network = config_.network, .bridge = "", .mac = "", .filter = "", .filter_ip = ""});
  }
  plan.domain.interfaces.insert(plan.domain.interfaces.end(), plan.extra_interfaces.begin(),
                                plan.extra_interfaces.end());
  plan.domain.tags = tags_for(r);
  plan.domain.tags.set(tag::kVcpus, std::to_string(flavor->vcpus));
  plan.domain.tags.set(tag::kMemoryMib, std::to_string(flavor->memory_mib));
  plan.domain.tags.set(tag::kDiskGib, std::to_string(plan.resources.disk_gib));
  return plan;
}

CapacityLedger::Hold InstanceService::admit_create(const CreatePlan& plan,
                                                   const std::optional<Restoring>& restoring) {
  if (draining()) {
    throw ServiceError(Code::draining,
                       "agent " + config_.agent_id + " is draining: it takes no new instances");
  }
  auto limit = limits_of(hypervisor_.capacity(), config_.capacity);
  // With shares set, instances bounded only by the guest address range count as bounded, as
  // capacity answers say (reservations and headroom of instances hold there too). The address
  // itself is chosen after this, under its own lock (record_create_intent).
  std::optional<AddressCount> addresses;
  if (!config_.shares.quotas.empty() || config_.shares.headroom != HeadroomConfig{}) {
    addresses = guests_->addresses();
    limit = limit_within_addresses(limit, addresses);
  }
  // A warm guest counts for the controller it is kept for, at low priority, and leaves room
  // for one more of its flavor besides itself: it never takes the slot a cold create needs.
  const auto& owner = plan.record.warm ? plan.record.warm->controller : plan.record.controller_id;
  const auto priority =
      plan.record.warm ? wire::Priority::low : plan.priority.value_or(wire::Priority::normal);
  const auto kept_free = plan.record.warm ? plan.resources : Resources{};
  const auto& key = restoring ? restoring->domain_name : plan.record.domain_name;
  const auto& added = restoring ? restoring->added : plan.resources;
  // Under the instance's lock: no other create of this name holds a reservation.
  auto held = capacity_ledger_.reserve(
      key, owner, [&] { return resources_of_agent_domains(); },
      restoring ? restoring->held : plan.resources,
      [&](const Usage& usage) {
        return HostShares(config_.shares, usage, limit,
                          addresses ? std::optional(addresses->free) : std::nullopt)
            .admit(owner, priority, added, kept_free, config_.agent_id);
      });
  if (auto* refusal = std::get_if<Refusal>(&held)) {
    // garm's creates only: a warm guest or cache builder the host has no room for is no pool
    // left waiting.
    if (!plan.record.warm && plan.record.controller_id != kCacheBuilderControllerId) {
      refusals_.count(refusal->reason);
    }
    if (refusal->reason == RefusalReason::capacity) {
      throw ServiceError(Code::no_capacity, no_room_text(plan, limit, addresses));
    }
    throw ServiceError(Code::no_capacity, refusal->message);
  }
  return std::move(std::get<CapacityLedger::Hold>(held));
}

std::string InstanceService::no_room_text(const CreatePlan& plan, const Resources& limit,
                                          const std::optional<AddressCount>& addresses) {
  if (addresses && addresses->free == 0) {
    return concat({"agent ", config_.agent_id, " has no free guest address: ",
                   std::to_string(addresses->held), " held, ", std::to_string(addresses->resting),
                   " resting after a delete, of ", std::to_string(addresses->total)});
  }
  const auto used = capacity_ledger_.usage(resources_of_agent_domains()).total;
  return concat({"agent ",
                 config_.agent_id,
                 " has no room for flavor ",
                 plan.record.flavor,
                 " (",
                 std::to_string(plan.resources.vcpus),
                 " vCPUs, ",
                 std::to_string(plan.resources.memory_mib),
                 " MiB): ",
                 std::to_string(used.instances),
                 " instances take ",
                 std::to_string(used.vcpus),
                 " of ",
                 std::to_string(limit.vcpus),
                 " vCPUs and ",
                 std::to_string(used.memory_mib),
                 " of ",
                 std::to_string(limit.memory_mib),
                 " MiB",
                 limit.instances > 0 ? ", limit " + std::to_string(limit.instances) + " instances"
                                     : std::string()});
}

std::pair<const ImageConfig*, const FlavorConfig*> InstanceService::fit_pool(
    const std::string& image_name, const std::string& flavor_name,
    std::optional<wire::OsType> os_type, std::optional<wire::OsArch> arch) const {
  const auto* image = config_.find_image(image_name);
  if (image == nullptr) {
    throw ServiceError(
        Code::invalid_argument,
        "unknown image \"" + image_name + "\"; this agent offers: " + names_of(config_.images));
  }
  const auto* flavor = config_.find_flavor(flavor_name);
  if (flavor == nullptr) {
    throw ServiceError(
        Code::invalid_argument,
        "unknown flavor \"" + flavor_name + "\"; this agent offers: " + names_of(config_.flavors));
  }
  if (arch && *arch != image->arch) {
    throw ServiceError(Code::invalid_argument, "image \"" + image->name + "\" is " +
                                                   std::string(wire::to_string(image->arch)) +
                                                   " but the pool asks for " +
                                                   std::string(wire::to_string(*arch)));
  }
  if (os_type && *os_type != wire::OsType::unknown && *os_type != image->os_type) {
    throw ServiceError(Code::invalid_argument, "image \"" + image->name + "\" is " +
                                                   std::string(wire::to_string(image->os_type)) +
                                                   " but the pool asks for " +
                                                   std::string(wire::to_string(*os_type)));
  }
  return {image, flavor};
}

void InstanceService::validate_pool(const ControllerId& controller, const PoolSpec& pool) {
  guarded("validate pool", [&] {
    const auto [image, flavor] = fit_pool(pool.image, pool.flavor, pool.os_type, pool.arch);
    base_image(*image);  // the base image must be there, not only named in the config
    // The pool's shape as a create of it would be given it: refused now, not at its first job.
    CreatePlan plan;
    plan.record.controller_id = controller.str();
    plan.record.domain_name = domain_name_for(controller, "pool-validation");
    plan.record.os_type = image->os_type;
    plan.domain.arch = guest_arch_for(image->arch);
    wire::BootstrapInstance bootstrap;
    bootstrap.extra_specs = pool.extra_specs;
    plan_shape(plan, bootstrap, *flavor);
    requested_caches(pool.extra_specs, controller.str());
  });
}

ImageBase InstanceService::base_image(const ImageConfig& image) {
  if (images_ != nullptr && images_->pulls(image.name)) {
    if (auto pulled = images_->ready(image.name)) {
      return *pulled;
    }
    if (image.base_path.empty() && image.base_volume.empty()) {
      const auto state = images_->state(image.name);
      throw ServiceError(Code::no_capacity, "image \"" + image.name + "\" is not pulled yet" +
                                                (state && !state->error.empty()
                                                     ? ": the last pull failed: " + state->error
                                                     : ": its pull is under way"));
    }
  }
  if (!image.base_path.empty()) {
    return {.path = image.base_path, .format = image.base_format};
  }
  const auto volume = hypervisor_.find_volume(config_.storage_pool, image.base_volume);
  if (!volume) {
    throw ServiceError(Code::internal, "image \"" + image.name + "\": base volume \"" +
                                           image.base_volume + "\" is not in storage pool \"" +
                                           config_.storage_pool + "\"");
  }
  return {.path = volume->path, .format = image.base_format};
}

std::optional<wire::ProviderInstance> InstanceService::reuse_existing(const CreatePlan& plan) {
  const auto& wanted = plan.record;
  const auto record = store_.get(wanted.domain_name);
  auto domain = hypervisor_.find_by_name(wanted.domain_name);
  const bool domain_is_ours =
      domain && owned_by(*domain, config_.agent_id, wanted.controller_id) &&
      domain->tags.get(tag::kName) == std::optional<std::string_view>(wanted.name);
  if ((domain && !domain_is_ours) || (record && record->controller_id != wanted.controller_id)) {
    throw ServiceError(Code::conflict,
                       "a domain named " + wanted.domain_name +
                           " exists and is not this agent's instance; nothing was changed");
  }
  if (record && record->intent == Intent::created && domain &&
      domain->uuid == record->domain_uuid) {
    if (domain->state == hypervisor::PowerState::shutoff) {
      hypervisor_.start(domain->uuid);
      domain = hypervisor_.find_by_uuid(domain->uuid);
    }
    if (domain && domain->state == hypervisor::PowerState::running) {
      log_.info("create " + wanted.name + ": exists as " + domain->uuid + "; nothing created");
      return describe(*domain);
    }
    // Paused (e.g. out of disk space) or crashed: garm needs a running instance, so the broken
    // one is replaced below.
    log_.warning("create " + wanted.name + ": the existing instance is not running; replacing it");
  }
  // Leftovers of an interrupted create or delete: clear them, then create afresh.
  if (record) {
    teardown(*record);
  }
  if (domain && (!record || domain->uuid != record->domain_uuid)) {
    teardown(record_for_orphan(*domain, config_.storage_pool));
  }
  return std::nullopt;
}

void InstanceService::record_create_intent(CreatePlan& plan) {
  if (!plan.guest) {
    store_.put(plan.record);
    return;
  }
  guests_->assign_address(*plan.guest, [&](const GuestPlan& guest) {
    plan.record.guest = guest.record;
    plan.domain.interfaces = {guest.interface};
    plan.domain.interfaces.insert(plan.domain.interfaces.end(), plan.extra_interfaces.begin(),
                                  plan.extra_interfaces.end());
    store_.put(plan.record);
    return plan.record;
  });
}

wire::ProviderInstance InstanceService::run_create(CreatePlan& plan) {
  auto& record = plan.record;
  std::string step =
      plan.guest ? "choose the guest's address and record the intent" : "record the intent";
  try {
    record_create_intent(plan);
    if (record.guest) {
      step = "reserve the guest's address " + record.guest->ip;
      guests_->reserve(*record.guest);
    }
    events_.record("requesting", record.name, record.controller_id, "domain " + record.domain_name);
    step = "create the overlay volume";
    const auto volume = hypervisor_.create_overlay(plan.volume);
    plan.domain.disk_path = volume.path;
    step = "create the cache overlays";
    create_cache_volumes(plan);
    step = "create the scratch disks";
    create_scratch_volumes(plan);
    step = "define the domain";
    hypervisor_.define(plan.domain);
    startup_.mark(record.domain_name, StartupPhase::defined);
    step = "start the domain";
    hypervisor_.start(record.domain_uuid);
    startup_.mark(record.domain_name, StartupPhase::started);
    step = "confirm the domain runs";
    const auto domain = hypervisor_.find_by_uuid(record.domain_uuid);
    if (!domain || domain->state != hypervisor::PowerState::running) {
      throw ServiceError(Code::internal, "the domain is not running after start");
    }
    step = "record the result";
    record.intent = Intent::created;
    store_.put(record);
    events_.record("created", record.name, record.controller_id,
                   "domain " + record.domain_name + " (" + record.domain_uuid + ")" +
                       (record.guest ? ", address " + record.guest->ip : ""));
    return describe(*domain);
  } catch (const std::exception& error) {
    startup_.fail(record.domain_name, StartupFailure::create_failed);
    std::string reason = "failed to " + step + ": " + error.what();
    try {
      teardown(record);
      reason += "; everything it made was removed";
    } catch (const std::exception& cleanup) {
      reason += "; cleanup is incomplete (" + std::string(cleanup.what()) +
                ") and the reconcile loop will finish it";
      log_.error("create " + record.name + ": cleanup after the failure is incomplete (" +
                 cleanup.what() + "); the reconcile loop will finish it");
    }
    throw ServiceError(code_of(error), "create " + record.name + " " + reason);
  }
}

}  // namespace garm_edge::agent
