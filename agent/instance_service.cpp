#include "agent/instance_service.hpp"

#include <algorithm>
#include <set>

#include "agent/identifiers.hpp"
#include "common/text.hpp"
#include "hypervisor/domain_xml.hpp"
#include "userdata/userdata.hpp"
#include "wire/error.hpp"
#include "wire/schemas.hpp"
#include "wire/validate.hpp"

namespace garm_edge::agent {
namespace {

using hypervisor::HypervisorError;
using Code = ServiceError::Code;

/// The keys of the tags every domain of ours carries (see hypervisor::Tags).
namespace tag {
constexpr const char* kAgent = "agent-id";
constexpr const char* kController = "controller-id";
constexpr const char* kPool = "pool-id";
constexpr const char* kName = "instance-name";
constexpr const char* kOsType = "os-type";
constexpr const char* kOsName = "os-name";
constexpr const char* kOsVersion = "os-version";
constexpr const char* kOsArch = "os-arch";
constexpr const char* kImage = "image";
constexpr const char* kFlavor = "flavor";
constexpr const char* kCreatedAt = "created-at";
constexpr const char* kStateId = "state-id";
}  // namespace tag

Code code_for(HypervisorError::Kind kind) {
  switch (kind) {
    case HypervisorError::Kind::not_found:
      return Code::not_found;
    case HypervisorError::Kind::already_exists:
      return Code::conflict;
    case HypervisorError::Kind::invalid_argument:
      return Code::invalid_argument;
    case HypervisorError::Kind::unavailable:
      return Code::unavailable;
    case HypervisorError::Kind::timeout:
      return Code::timeout;
    default:
      return Code::internal;
  }
}

Code code_of(const std::exception& error) {
  if (const auto* service = dynamic_cast<const ServiceError*>(&error)) {
    return service->code();
  }
  if (const auto* hv = dynamic_cast<const HypervisorError*>(&error)) {
    return code_for(hv->kind());
  }
  // garm's input that cannot be rendered for the guest is garm's to fix, not an agent fault.
  if (dynamic_cast<const wire::WireError*>(&error) != nullptr ||
      dynamic_cast<const userdata::UserDataError*>(&error) != nullptr) {
    return Code::invalid_argument;
  }
  return Code::internal;
}

/// Runs one command and turns every failure into a ServiceError carrying `context`.
template <class Fn>
auto guarded(const std::string& context, Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const ServiceError&) {
    throw;
  } catch (const StoreError& e) {
    throw ServiceError(Code::internal, context + ": state directory: " + e.what());
  } catch (const std::exception& e) {
    throw ServiceError(code_of(e), context + ": " + e.what());
  }
}

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

template <class Named>
std::string names_of(const std::vector<Named>& items) {
  std::string names;
  for (const auto& item : items) {
    names += (names.empty() ? "" : ", ") + item.name;
  }
  return names;
}

std::string tag_or_empty(const hypervisor::Tags& tags, const char* key) {
  return std::string(tags.get(key).value_or(""));
}

}  // namespace

std::string_view to_string(ServiceError::Code code) {
  switch (code) {
    case Code::invalid_argument:
      return "invalid_argument";
    case Code::not_found:
      return "not_found";
    case Code::conflict:
      return "conflict";
    case Code::unavailable:
      return "unavailable";
    case Code::timeout:
      return "timeout";
    case Code::internal:
      return "internal";
  }
  return "internal";
}

InstanceService::InstanceService(const AgentConfig& config, hypervisor::Hypervisor& hypervisor,
                                 InstanceStore& store, const Clock& clock, Logger& logger)
    : config_(config),
      hypervisor_(hypervisor),
      store_(store),
      clock_(clock),
      log_(logger),
      create_gate_(config.max_concurrent_creates),
      events_(clock, logger) {}

void InstanceService::serve_guests(GuestAccess& access, GuestIndex& index) {
  guests_ = &access;
  guest_index_ = &index;
  for (const auto& record : store_.list()) {
    if (record.intent == Intent::created) {  // reconcile removes the others
      index.put(record);
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
    if (guest_index_ != nullptr) {
      guest_index_->put(*record);
    }
  }
  return record;
}

// ---- create -------------------------------------------------------------------------------

wire::ProviderInstance InstanceService::create(std::string_view controller_id,
                                               const wire::BootstrapInstance& bootstrap) {
  try {
    return guarded("create " + printable_excerpt(bootstrap.name), [&] {
      auto plan = plan_create(controller_id, bootstrap);
      auto lock = instance_locks_.lock(plan.record.domain_name);
      if (auto existing = reuse_existing(plan)) {
        return *existing;
      }
      events_.record("creating", plan.record.name, plan.record.controller_id,
                     "image " + plan.record.image + ", flavor " + plan.record.flavor);
      auto slot = create_gate_.acquire();
      return run_create(plan);
    });
  } catch (const ServiceError& e) {
    // Every failed create leaves one line, refusals before any libvirt step included.
    const bool agent_fault = e.code() != Code::invalid_argument && e.code() != Code::conflict;
    log_.log(agent_fault ? Level::error : Level::warning, e.what());
    throw;
  }
}

DryRunResult InstanceService::dry_run_create(std::string_view controller_id,
                                             const wire::BootstrapInstance& bootstrap) {
  return guarded("dry run of " + printable_excerpt(bootstrap.name), [&] {
    auto plan = plan_create(controller_id, bootstrap);
    plan.domain.disk_path = hypervisor_.pool_path(plan.volume.pool) + "/" + plan.volume.name;
    const auto existing = find_owned_domain(controller_id, plan.record.domain_name);
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

InstanceService::CreatePlan InstanceService::plan_create(std::string_view controller_id,
                                                         const wire::BootstrapInstance& b) {
  wire::validate_uuid(controller_id, "controller_id");
  wire::validate_bootstrap(b);
  const auto [image, flavor] = fit_pool(b.image, b.flavor, b.os_type, b.arch);

  CreatePlan plan;
  auto& r = plan.record;
  r.domain_name = domain_name_for(controller_id, b.name);
  r.domain_uuid = random_uuid();
  r.controller_id = std::string(controller_id);
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

  plan.volume = hypervisor::VolumeSpec{
      .pool = r.volume_pool,
      .name = r.volume_name,
      .capacity_bytes = flavor->disk_gib << 30U,
      .backing_path = base_image_path(*image),
      .backing_format = image->base_format,
  };
  plan.domain.name = r.domain_name;
  plan.domain.uuid = r.domain_uuid;
  plan.domain.arch = guest_arch_for(image->arch);
  plan.domain.vcpus = flavor->vcpus;
  plan.domain.memory_mib = flavor->memory_mib;
  if (guests_ != nullptr) {
    plan.guest = guests_->plan(r, b);
    plan.domain.smbios_serial = plan.guest->smbios_serial;
    plan.domain.interfaces = {plan.guest->interface};  // the filter follows with the address
  } else if (!config_.network.empty()) {
    plan.domain.interfaces.push_back(
        {.network = config_.network, .mac = "", .filter = "", .filter_ip = ""});
  }
  plan.domain.tags = tags_for(r);
  return plan;
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

void InstanceService::validate_pool(const std::string& image_name, const std::string& flavor_name,
                                    std::optional<wire::OsType> os_type,
                                    std::optional<wire::OsArch> arch,
                                    const std::optional<nlohmann::json>& extra_specs) {
  guarded("validate pool", [&] {
    wire::validate_resource_name(image_name, "image");
    wire::validate_resource_name(flavor_name, "flavor");
    wire::validate_extra_specs(extra_specs);
    if (extra_specs) {
      wire::validate_extra_spec_keys(*extra_specs);
    }
    const auto [image, flavor] = fit_pool(image_name, flavor_name, os_type, arch);
    base_image_path(*image);  // the base image must be there, not only named in the config
  });
}

std::string InstanceService::base_image_path(const ImageConfig& image) {
  if (!image.base_path.empty()) {
    return image.base_path;
  }
  const auto volume = hypervisor_.find_volume(config_.storage_pool, image.base_volume);
  if (!volume) {
    throw ServiceError(Code::internal, "image \"" + image.name + "\": base volume \"" +
                                           image.base_volume + "\" is not in storage pool \"" +
                                           config_.storage_pool + "\"");
  }
  return volume->path;
}

std::optional<wire::ProviderInstance> InstanceService::reuse_existing(const CreatePlan& plan) {
  const auto& wanted = plan.record;
  const auto record = store_.get(wanted.domain_name);
  auto domain = hypervisor_.find_by_name(wanted.domain_name);
  const bool domain_is_ours =
      domain && owned_by(*domain, wanted.controller_id) &&
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
    teardown(record_for_orphan(*domain));
  }
  return std::nullopt;
}

void InstanceService::record_create_intent(CreatePlan& plan) {
  if (!plan.guest) {
    store_.put(plan.record);
    return;
  }
  std::lock_guard lock(address_mutex_);
  guests_->assign_address(*plan.guest, guest_index_->addresses());
  plan.record.guest = plan.guest->record;
  plan.domain.interfaces = {plan.guest->interface};
  store_.put(plan.record);
  guest_index_->put(plan.record);
}

wire::ProviderInstance InstanceService::run_create(CreatePlan& plan) {
  auto& record = plan.record;
  std::string step = "record the intent";
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
    step = "define the domain";
    hypervisor_.define(plan.domain);
    step = "start the domain";
    hypervisor_.start(record.domain_uuid);
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

// ---- lookups ------------------------------------------------------------------------------

bool InstanceService::owned_by(const hypervisor::Domain& domain,
                               std::string_view controller_id) const {
  return domain.tags.get(tag::kAgent) == std::optional<std::string_view>(config_.agent_id) &&
         domain.tags.get(tag::kController) == std::optional<std::string_view>(controller_id);
}

std::optional<hypervisor::Domain> InstanceService::find_owned_domain(std::string_view controller_id,
                                                                     std::string_view domain_name) {
  auto domain = hypervisor_.find_by_name(domain_name);
  if (domain && owned_by(*domain, controller_id)) {
    return domain;
  }
  return std::nullopt;
}

std::optional<InstanceService::Target> InstanceService::resolve(std::string_view controller_id,
                                                                std::string_view instance) {
  wire::validate_uuid(controller_id, "controller_id");
  if (wire::is_uuid(instance)) {
    const std::string uuid(instance);
    if (auto domain = hypervisor_.find_by_uuid(uuid); domain && owned_by(*domain, controller_id)) {
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

// ---- delete, start, stop ------------------------------------------------------------------

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
  InstanceRecord doomed = record ? *record : record_for_orphan(*domain);
  doomed.intent = Intent::deleting;
  events_.record("destroying", doomed.name, doomed.controller_id, "domain " + doomed.domain_name);
  store_.put(doomed);
  teardown(doomed);
  if (domain && domain->uuid != doomed.domain_uuid) {
    teardown(record_for_orphan(*domain));
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

// ---- teardown and reconcile ---------------------------------------------------------------

void InstanceService::teardown(const InstanceRecord& record) {
  if (guest_index_ != nullptr) {
    guest_index_->remove(record.domain_name);  // its seed and relay access end first
  }
  hypervisor_.destroy(record.domain_uuid);
  hypervisor_.undefine(record.domain_uuid);
  if (record.guest && guests_ != nullptr) {
    // Only once no domain holds the address's MAC, which the next guest there gets too.
    guests_->release(*record.guest);
  }
  hypervisor_.delete_volume(record.volume_pool, record.volume_name);
  store_.remove(record.domain_name);
}

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
             (guests_ != nullptr ? " and no address reservation is released" : "") +
             " until each file is repaired or removed");
}

InstanceRecord InstanceService::record_for_orphan(const hypervisor::Domain& domain) const {
  InstanceRecord record;
  record.domain_name = domain.name;
  record.domain_uuid = domain.uuid;
  record.controller_id = tag_or_empty(domain.tags, tag::kController);
  record.pool_id = tag_or_empty(domain.tags, tag::kPool);
  record.name = tag_or_empty(domain.tags, tag::kName);
  record.volume_pool = config_.storage_pool;
  record.volume_name = volume_name_for(domain.name);
  record.intent = Intent::deleting;
  return record;
}

ReconcileReport InstanceService::reconcile() {
  ReconcileReport report;
  const auto run_locked = [&](const std::string& domain_name, const auto& action) {
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
  };
  try {
    for (const auto& listed : store_.list()) {
      run_locked(listed.domain_name, [&] {
        if (const auto record = store_.get(listed.domain_name)) {
          reconcile_record(*record, report);
        }
      });
    }
    for (const auto& domain : hypervisor_.list({{tag::kAgent, config_.agent_id}})) {
      run_locked(domain.name, [&] {
        if (!store_.get(domain.name)) {
          reconcile_domain(domain, report);
        }
      });
    }
    for (const auto& volume : hypervisor_.list_volumes(config_.storage_pool)) {
      if (const auto domain_name = domain_name_of_volume(volume)) {
        run_locked(*domain_name, [&] { reconcile_volume(volume, *domain_name, report); });
      }
    }
    const auto unreadable = store_.unreadable();
    report_unreadable(unreadable);
    if (!unreadable.empty()) {
      // An unreadable record may hold a running guest's address: releasing "unheld"
      // reservations could hand it to a second guest.
    } else if (guests_ != nullptr) {
      std::lock_guard lock(address_mutex_);  // no create is between choosing and recording
      auto held = guest_index_->addresses();
      for (const auto& record : store_.list()) {  // also those whose teardown is unfinished
        if (record.guest && !record.guest->ip.empty()) {
          held.insert(record.guest->ip);
        }
      }
      report.orphan_reservations += guests_->release_unheld(held);
    }
  } catch (const std::exception& e) {
    ++report.failures;
    log_.error(std::string("reconcile pass stopped: ") + e.what());
  }
  return report;
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
    case Intent::created:
      if (!hypervisor_.find_by_uuid(record.domain_uuid)) {
        teardown(record);
        ++report.vanished_domains;
        log_.warning("reconcile: domain of " + record.name +
                     " disappeared; removed its overlay volume and record");
      }
      return;
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
  teardown(record_for_orphan(domain));
  ++report.orphan_domains;
  log_.warning("reconcile: removed domain " + domain.name +
               ", which carried this agent's tag but had no record");
}

void InstanceService::reconcile_volume(const std::string& volume_name,
                                       const std::string& domain_name, ReconcileReport& report) {
  if (store_.get(domain_name) || hypervisor_.find_by_name(domain_name)) {
    return;
  }
  // A create's overlay whose record was already rolled back: e.g. a volume call that
  // finished after its deadline had passed.
  hypervisor_.delete_volume(config_.storage_pool, volume_name);
  ++report.orphan_volumes;
  log_.warning("reconcile: removed overlay volume " + volume_name + ", which no instance uses");
}

std::map<std::string, std::size_t> InstanceService::count_by_state() {
  std::map<std::string, std::size_t> counts;
  for (const auto& domain : hypervisor_.list({{tag::kAgent, config_.agent_id}})) {
    ++counts[std::string(hypervisor::to_string(domain.state))];
  }
  return counts;
}

// ---- views --------------------------------------------------------------------------------

hypervisor::Tags InstanceService::tags_for(const InstanceRecord& r) const {
  return hypervisor::Tags{
      {tag::kAgent, config_.agent_id},
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
      {tag::kStateId, store_.state_id()},
  };
}

wire::ProviderInstance InstanceService::describe(const hypervisor::Domain& domain) const {
  wire::ProviderInstance instance;
  instance.provider_id = domain.uuid;
  instance.name = tag_or_empty(domain.tags, tag::kName);
  instance.os_type = wire::parse_enum<wire::OsType>(tag_or_empty(domain.tags, tag::kOsType));
  instance.os_name = tag_or_empty(domain.tags, tag::kOsName);
  instance.os_version = tag_or_empty(domain.tags, tag::kOsVersion);
  instance.os_arch = wire::parse_enum<wire::OsArch>(tag_or_empty(domain.tags, tag::kOsArch));
  instance.status = status_for(domain.state);
  const auto guest =
      guest_index_ != nullptr ? guest_index_->get(domain.name) : std::optional<GuestIndex::Entry>();
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

}  // namespace garm_edge::agent
