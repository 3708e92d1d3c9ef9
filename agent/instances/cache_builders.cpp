// Cache builders as instances (docs/caches.md): guests of a cache's refresh, made under
// kCacheBuilderControllerId with the builder's own user-data and disks, never given anything of
// garm's.

#include "agent/instances/identifiers.hpp"
#include "agent/instances/instance_service.hpp"
#include "net/random.hpp"
#include "net/secret_token.hpp"

namespace garm_edge::agent {
namespace {

const ControllerId& builder_controller() {
  static const auto controller = ControllerId::parse(kCacheBuilderControllerId);
  return controller;
}

std::string random_suffix() {
  constexpr std::string_view kAlphabet = "abcdefghijklmnopqrstuvwxyz0123456789";
  std::array<unsigned char, 8> bytes{};
  net::random_bytes(bytes);
  std::string suffix;
  for (const auto byte : bytes) {
    suffix += kAlphabet[byte % kAlphabet.size()];
  }
  return suffix;
}

}  // namespace

std::string InstanceService::create_builder(const BuilderSpec& spec) {
  const auto* image = config_.find_image(spec.image);
  if (image == nullptr || config_.find_flavor(spec.flavor) == nullptr) {
    throw ServiceError(ServiceError::Code::invalid_argument,
                       "the builder of cache " + spec.cache + " names an unknown image or flavor");
  }
  wire::BootstrapInstance bootstrap;
  bootstrap.name = "cache-" + spec.cache + "-" + random_suffix();
  bootstrap.pool_id = random_uuid();
  bootstrap.image = spec.image;
  bootstrap.flavor = spec.flavor;
  bootstrap.os_type = image->os_type;
  bootstrap.arch = image->arch;
  bootstrap.repo_url = "https://cache-builder.invalid/";
  // Never called: the relay serves nothing of garm's to a builder.
  bootstrap.callback_url = "https://cache-builder.invalid/api/v1/callbacks";
  bootstrap.metadata_url = "https://cache-builder.invalid/api/v1/metadata";
  bootstrap.instance_token = net::random_token();
  bootstrap.extra_specs = nlohmann::json::object();
  return guarded("create the builder of cache " + spec.cache, [&] {
    auto plan = plan_create(builder_controller(), bootstrap);
    if (!plan.guest) {
      throw ServiceError(ServiceError::Code::internal,
                         "a cache builder needs [guests]: it fetches its seed there");
    }
    plan.guest->record.user_data = spec.user_data;
    plan.guest->record.vendor_data.clear();
    plan.domain.extra_disks = spec.disks;
    auto lock = instance_locks_.lock(plan.record.domain_name);
    const auto hold = admit_create(plan);
    events_.record("creating", plan.record.name, plan.record.controller_id,
                   "builder of cache " + spec.cache + ", image " + spec.image);
    auto slot = create_gate_.acquire();
    run_create(plan);
    return plan.record.domain_name;
  });
}

std::optional<hypervisor::PowerState> InstanceService::builder_state(
    const std::string& domain_name) {
  const auto record = store_.get(domain_name);
  if (!record || record->controller_id != kCacheBuilderControllerId) {
    return std::nullopt;
  }
  const auto domain = hypervisor_.find_by_uuid(record->domain_uuid);
  return domain ? std::optional(domain->state) : std::nullopt;
}

void InstanceService::remove_builder(const std::string& domain_name) {
  const auto record = store_.get(domain_name);
  if (record && record->controller_id == kCacheBuilderControllerId) {
    remove(builder_controller(), InstanceRef::parse(record->name));
  }
}

std::size_t InstanceService::remove_builders() {
  std::size_t removed = 0;
  for (const auto& record : store_.list()) {
    if (record.controller_id == kCacheBuilderControllerId) {
      remove(builder_controller(), InstanceRef::parse(record.name));
      ++removed;
    }
  }
  return removed;
}

}  // namespace garm_edge::agent
