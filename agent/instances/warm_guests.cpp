// Warm guests as instances: made under kWarmControllerId by the warm pool, and made garm's
// instance by binding, under garm's create (docs/warm-guests.md).

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "agent/instances/domain_view.hpp"
#include "agent/instances/identifiers.hpp"
#include "agent/instances/instance_service.hpp"
#include "agent/instances/warm_spec.hpp"
#include "net/random.hpp"
#include "net/secret_token.hpp"
#include "wire/error.hpp"
#include "wire/validate.hpp"

namespace garm_edge::agent {
namespace {

std::string random_warm_name() {
  constexpr std::string_view kAlphabet = "abcdefghijklmnopqrstuvwxyz0123456789";
  std::array<unsigned char, 12> bytes{};
  net::random_bytes(bytes);
  std::string name = "warm-";
  for (const auto byte : bytes) {
    name += kAlphabet[byte % kAlphabet.size()];
  }
  return name;
}

constexpr std::string_view kToolsFile = "runner-tools.json";

/// The controller a kept tool belongs to. None for entries kept before tools were per
/// controller: they are nobody's, and a warm guest must not unpack what an unknown controller
/// chose.
std::optional<std::string> tool_owner(const nlohmann::json& item) {
  if (!item.is_object() || !item.contains("tool")) {
    return std::nullopt;
  }
  const auto controller = item.find("controller");
  if (controller == item.end() || !controller->is_string() ||
      !wire::is_uuid(controller->get_ref<const std::string&>())) {
    return std::nullopt;
  }
  return controller->get<std::string>();
}

}  // namespace

/// The last tools each controller sent in a create that succeeded, kept across restarts so
/// its warm guests made right after one can unpack the runner too. A hint: an unreadable file
/// is an empty one, and a failure to keep it fails nothing.
void InstanceService::remember_tool(const ControllerId& controller,
                                    const wire::BootstrapInstance& bootstrap) {
  if (!bootstrap.tools) {
    return;  // kept with no [[warm]] too: warm guests configured after a restart use it
  }
  std::lock_guard lock(tools_mutex_);
  load_tools();
  bool changed = false;
  for (const auto& tool : *bootstrap.tools) {
    if (tool.os && tool.architecture && tool.sha256_checksum && tool.download_url) {
      auto& known = latest_tools_[{
          .controller = controller.str(), .os = *tool.os, .arch = *tool.architecture}];
      changed = changed || wire::to_json(known) != wire::to_json(tool);
      known = tool;
    }
  }
  if (!changed) {
    return;
  }
  try {
    save_tools();
  } catch (const std::exception& e) {
    log_.warning(std::string("the runner tools could not be kept: ") + e.what());
  }
}

void InstanceService::save_tools() const {
  auto document = nlohmann::ordered_json::array();
  for (const auto& [key, tool] : latest_tools_) {
    auto kept = tool;
    kept.temp_download_token.reset();  // GHES's token is short-lived and a secret
    document.push_back({{"controller", key.controller}, {"tool", wire::to_json(kept)}});
  }
  const auto path = config_.state_dir / kToolsFile;
  const auto temporary = path.string() + ".tmp";
  std::ofstream(temporary, std::ios::trunc) << document.dump() << "\n";
  std::error_code ignored;
  std::filesystem::permissions(
      temporary, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write, ignored);
  std::filesystem::rename(temporary, path, ignored);
}

void InstanceService::load_tools() {
  if (tools_loaded_) {
    return;
  }
  tools_loaded_ = true;
  std::ifstream in(config_.state_dir / kToolsFile);
  const auto document = nlohmann::json::parse(in, nullptr, false);
  if (!document.is_array()) {
    return;
  }
  for (const auto& item : document) {
    const auto owner = tool_owner(item);
    if (!owner) {
      continue;
    }
    try {
      const auto tool = wire::tool_from_json(item["tool"], std::string(kToolsFile));
      if (tool.os && tool.architecture) {
        latest_tools_[{.controller = *owner, .os = *tool.os, .arch = *tool.architecture}] = tool;
      }
    } catch (const wire::WireError&) {
      // a hint, not a record
    }
  }
}

std::optional<wire::RunnerApplicationDownload> InstanceService::latest_tool(
    std::string_view controller, const ImageConfig& image) {
  std::lock_guard lock(tools_mutex_);
  load_tools();
  const auto it = latest_tools_.find(tool_key_of(controller, image));
  return it == latest_tools_.end() ? std::nullopt : std::optional(it->second);
}

InstanceService::ToolKey InstanceService::tool_key_of(std::string_view controller,
                                                      const ImageConfig& image) {
  // GitHub's spelling of the image's OS and arch, as garm's tools use it.
  const std::string os = image.os_type == wire::OsType::windows ? "win" : "linux";
  const std::string arch = image.arch == wire::OsArch::arm64 ? "arm64"
                           : image.arch == wire::OsArch::arm ? "arm"
                                                             : "x64";
  return {.controller = std::string(controller), .os = os, .arch = arch};
}

std::vector<InstanceRecord> InstanceService::warm_guests() {
  std::vector<InstanceRecord> warm;
  for (auto& record : store_.list()) {
    if (record.warm && record.warm->state != WarmState::bound &&
        record.controller_id == kWarmControllerId) {
      warm.push_back(std::move(record));
    }
  }
  return warm;
}

std::vector<WarmCount> InstanceService::warm_counts() {
  const auto guests = warm_guests();
  std::vector<WarmCount> counts;
  for (const auto& warm : config_.warm) {
    const auto spec = warm_spec_of(config_, warm);
    WarmCount count{.controller = warm.controller,
                    .image = warm.image,
                    .flavor = warm.flavor,
                    .ready = 0,
                    .warming = 0};
    for (const auto& guest : guests) {
      if (guest.warm->spec != spec || guest.intent != Intent::created) {
        continue;  // bind_warm would not take it
      }
      const bool bindable_now =
          guest.warm->state == WarmState::ready || guest.warm->state == WarmState::saved;
      (bindable_now ? count.ready : count.warming) += 1;
    }
    counts.push_back(count);
  }
  return counts;
}

wire::ProviderInstance InstanceService::create_warm(const WarmConfig& warm) {
  const auto* image = config_.find_image(warm.image);
  if (image == nullptr || config_.find_flavor(warm.flavor) == nullptr) {
    throw ServiceError(ServiceError::Code::invalid_argument,
                       "[[warm]] " + warm.name + " names an unknown image or flavor");
  }
  const auto spec = warm_spec_of(config_, warm);
  wire::BootstrapInstance bootstrap;
  bootstrap.name = random_warm_name();
  bootstrap.pool_id = warm_pool_id(spec);
  bootstrap.image = warm.image;
  bootstrap.flavor = warm.flavor;
  bootstrap.os_type = image->os_type;
  bootstrap.arch = image->arch;
  bootstrap.repo_url = "https://warm.invalid/";
  // Never called: the relay refuses a warm guest until it is bound to garm's instance.
  bootstrap.callback_url = "https://warm.invalid/api/v1/callbacks";
  bootstrap.metadata_url = "https://warm.invalid/api/v1/metadata";
  bootstrap.instance_token = net::random_token();  // the warm guest's own, not garm's
  bootstrap.user_data_options.disable_updates_on_boot = true;
  bootstrap.extra_specs = nlohmann::json::object();
  if (auto tool = latest_tool(warm.controller, *image)) {  // its own controller's only
    bootstrap.tools = std::vector<wire::RunnerApplicationDownload>{*tool};
  }
  const WarmRecord record{.spec = spec,
                          .controller = warm.controller,
                          .state = WarmState::warming,
                          .token_hash = net::sha256_hex(bootstrap.instance_token),
                          .ready_at = "",
                          .bound_at = "",
                          .assignment = "",
                          .delivered = false,
                          .unpacked_sha256 = "",
                          .saved_at = ""};
  return create_as(ControllerId::parse(kWarmControllerId), bootstrap, &record, WarmUse::preferred);
}

bool InstanceService::mark_warm_ready(std::string_view domain_name) {
  const std::string name(domain_name);
  auto made_ready = std::make_shared<bool>(false);  // outlives this call when deferred
  instance_locks_.run_or_defer(name, [this, name, made_ready] {
    auto record = store_.get(name);
    if (!record || !record->warm || record->warm->state != WarmState::warming ||
        record->intent != Intent::created) {
      return;
    }
    record->warm->state = WarmState::ready;
    record->warm->ready_at = format_rfc3339(clock_.now());
    store_.put(*record);
    events_.record("warm-ready", record->name, record->controller_id,
                   "warm guest of " + record->image + "/" + record->flavor + " is ready");
    *made_ready = true;
  });
  return *made_ready;
}

std::optional<std::string> InstanceService::take_assignment(std::string_view domain_name) {
  // Never while an operation holds the guest (a bind may still be rolled back): the guest asks
  // again after the 204, and never waits behind the operation.
  const auto lock = instance_locks_.try_lock(std::string(domain_name));
  if (!lock) {
    return std::nullopt;
  }
  const auto record = store_.get(domain_name);
  if (!record || !record->warm || record->warm->state != WarmState::bound ||
      record->warm->delivered) {
    return std::nullopt;
  }
  return record->warm->assignment;  // again if the answer was lost, until the guest runs it
}

void InstanceService::finish_assignment(std::string_view domain_name) {
  const std::string name(domain_name);
  instance_locks_.run_or_defer(name, [this, name] {
    auto record = store_.get(name);
    if (!record || !record->warm || record->warm->state != WarmState::bound ||
        record->warm->delivered) {
      return;
    }
    record->warm->assignment.clear();
    record->warm->delivered = true;
    store_.put(*record);
    guests_->admit(*record);  // the warm token stops working
  });
}

std::optional<hypervisor::Domain> InstanceService::find_bound(const ControllerId& controller,
                                                              const std::string& name) {
  const hypervisor::Tags filter{
      {tag::kAgent, config_.agent_id}, {tag::kController, controller.str()}, {tag::kName, name}};
  const auto canonical = domain_name_for(controller, name);
  for (auto& domain : hypervisor_.list(filter)) {
    if (domain.name != canonical) {
      return std::move(domain);
    }
  }
  return std::nullopt;
}

hypervisor::Tags InstanceService::bound_tags(const InstanceRecord& bound,
                                             const hypervisor::Domain& domain) const {
  auto tags = tags_for(bound);
  for (const char* key : {tag::kVcpus, tag::kMemoryMib, tag::kDiskGib}) {
    if (const auto value = domain.tags.get(key)) {
      tags.set(key, std::string(*value));
    }
  }
  return tags;
}

void InstanceService::unbind(const InstanceRecord& warm, const hypervisor::Domain& domain,
                             bool restored) {
  // The call may have taken effect after its deadline, or live and not persistent: put the
  // warm tags back, or else remove the guest (neither garm's nor the pool's any more). A
  // restored guest is no saved one any more: it goes.
  try {
    if (restored) {
      throw ServiceError(ServiceError::Code::internal, "it was restored for the create");
    }
    store_.put(warm);
    hypervisor_.set_tags(domain.uuid, bound_tags(warm, domain));
  } catch (const std::exception& e) {
    log_.warning("warm guest " + warm.domain_name + " could not be restored (" + e.what() +
                 "); removing it");
    try {
      teardown(warm);
    } catch (const std::exception&) {
      // reconcile re-tags it from its record, or removes it
    }
  }
}

bool InstanceService::bindable(const InstanceRecord& record, std::string_view spec,
                               std::string_view controller) {
  // The owner and the spec (which includes the owner) both: a guest made for one controller,
  // or by an agent before warm guests had owners, never becomes another's instance.
  return record.warm &&
         (record.warm->state == WarmState::ready || record.warm->state == WarmState::saved) &&
         record.warm->spec == spec && record.warm->controller == controller &&
         record.controller_id == kWarmControllerId && record.intent == Intent::created;
}

std::optional<wire::ProviderInstance> InstanceService::bind_warm(
    const wire::BootstrapInstance& bootstrap, const CreatePlan& plan) {
  const auto& controller = plan.record.controller_id;
  const auto warm = std::find_if(config_.warm.begin(), config_.warm.end(), [&](const auto& w) {
    return w.controller == controller && w.image == plan.record.image &&
           w.flavor == plan.record.flavor;
  });
  // A warm guest has its flavor's shape: a pool that asks for more gets a guest of its own.
  if (warm == config_.warm.end() || draining() || !plan.shape.is_default()) {
    return std::nullopt;
  }
  const auto spec = warm_spec_of(config_, *warm);
  auto candidates = warm_guests();
  std::erase_if(candidates,
                [&](const InstanceRecord& r) { return !bindable(r, spec, controller); });
  // Running ones first (no restore to wait for), then saved ones; each the longest ready first.
  std::sort(candidates.begin(), candidates.end(), [](const auto& a, const auto& b) {
    const bool a_saved = a.warm->state == WarmState::saved;
    const bool b_saved = b.warm->state == WarmState::saved;
    return a_saved != b_saved ? b_saved : a.warm->ready_at < b.warm->ready_at;
  });
  const auto taken = clock_.now();
  for (const auto& candidate : candidates) {
    if (auto bound = bind_candidate(candidate, bootstrap, plan, spec, taken)) {
      std::function<void(const std::string&)> listener;
      {
        std::lock_guard lock(warm_bound_mutex_);
        listener = warm_bound_listener_;
      }
      if (listener) {
        listener(candidate.domain_name);  // its poll for the assignment is answered now
      }
      return bound;
    }
  }
  return std::nullopt;
}

void InstanceService::on_warm_bound(std::function<void(const std::string&)> listener) {
  std::lock_guard lock(warm_bound_mutex_);
  warm_bound_listener_ = std::move(listener);
}

std::optional<wire::ProviderInstance> InstanceService::bind_candidate(
    const InstanceRecord& candidate, const wire::BootstrapInstance& bootstrap,
    const CreatePlan& plan, std::string_view spec, std::chrono::system_clock::time_point taken) {
  const auto& controller = plan.record.controller_id;
  auto lock = instance_locks_.lock(candidate.domain_name);
  const auto record = store_.get(candidate.domain_name);  // as it is under the lock
  if (!record || !bindable(*record, spec, controller)) {
    return std::nullopt;
  }
  const bool restored = record->warm->state == WarmState::saved;
  const auto domain =
      restored ? restore_saved(*record, plan) : hypervisor_.find_by_uuid(record->domain_uuid);
  if (!domain || domain->state != hypervisor::PowerState::running) {
    return std::nullopt;  // reconcile or the warm pool deals with it
  }
  auto binding = guests_->bind(*record, bootstrap);
  InstanceRecord bound = *record;
  bound.controller_id = plan.record.controller_id;
  bound.pool_id = plan.record.pool_id;
  bound.name = plan.record.name;
  bound.created_at = plan.record.created_at;
  bound.guest = std::move(binding.guest);
  bound.warm->state = WarmState::bound;
  bound.warm->bound_at = bound.created_at;
  bound.warm->assignment = std::move(binding.assignment);
  const auto tags = bound_tags(bound, *domain);
  // The record first: after a crash between the two, reconcile re-tags from it.
  store_.put(bound);
  try {
    hypervisor_.set_tags(domain->uuid, tags);
  } catch (const std::exception& e) {
    unbind(restored ? bound : *record, *domain, restored);
    log_.warning("create " + bound.name + ": could not bind warm guest " + bound.domain_name +
                 " (" + e.what() + "); it is not used");
    return std::nullopt;
  }
  startup_.begin(bound.domain_name, bound.name, bound.controller_id,
                 {.pool = bound.pool_id,
                  .image = bound.image,
                  .flavor = bound.flavor,
                  .warm = true,
                  .restored = restored},
                 restored ? taken : clock_.now());
  if (restored) {
    startup_.mark(bound.domain_name, StartupPhase::restored);
  }
  guests_->admit(bound);
  ++warm_bound_;
  events_.record("created", bound.name, bound.controller_id,
                 "warm guest " + bound.domain_name + " (" + bound.domain_uuid + ") " +
                     (restored ? "restored and bound" : "bound") +
                     (bound.guest ? ", address " + bound.guest->ip : ""));
  const auto now = hypervisor_.find_by_uuid(domain->uuid);
  return describe(now ? *now : *domain);
}

}  // namespace garm_edge::agent
