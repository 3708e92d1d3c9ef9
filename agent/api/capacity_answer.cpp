// What an agent tells placement and the fleet view of itself (`GET /v1/capacity`).
#include "agent/api/capacity_answer.hpp"

#include <algorithm>
#include <set>

#include "agent/instances/cache_generations.hpp"
#include "common/text.hpp"
#include "hypervisor/guest_arch.hpp"
#include "wire/validate.hpp"

#ifndef GARM_EDGE_VERSION
#define GARM_EDGE_VERSION "0.0.0"
#endif

namespace garm_edge::agent {
namespace {

const char* offer_state(const ImagePullState& pull) {
  if (pull.has_base) {
    return "ready";
  }
  return pull.phase == ImagePullState::Phase::failed ? "failed" : "pulling";
}

std::optional<wire::AddressAmount> address_amount(const std::optional<AddressCount>& addresses) {
  if (!addresses) {
    return std::nullopt;
  }
  return wire::AddressAmount{.total = addresses->total,
                             .held = addresses->held,
                             .resting = addresses->resting,
                             .free = addresses->free};
}

/// The host's capacity; its warm offers only of the controllers `shown` lets through: the
/// asking controller's for a placement (no other controller's create may take them), those a
/// client may act for otherwise (other controllers' IDs are not a tenant's to see).
/// The caches of the controllers `shown` lets through, and where each stands.
std::vector<wire::CacheOffer> cache_offers(const CacheGenerations* caches,
                                           const ControllerFilter& shown) {
  std::vector<wire::CacheOffer> offers;
  if (caches == nullptr) {
    return offers;
  }
  for (const auto& status : caches->statuses()) {
    if (shown(status.controller)) {
      offers.push_back({.name = status.name,
                        .controller = status.controller,
                        .generation = status.generation,
                        .made_at = status.made_at,
                        .refreshing = status.refreshing,
                        .error = status.error});
    }
  }
  return offers;
}

std::string os_arch_name(hypervisor::GuestArch arch) {
  switch (arch) {
    case hypervisor::GuestArch::aarch64:
      return "arm64";
    case hypervisor::GuestArch::armv7l:
      return "arm";
    default:
      return "amd64";
  }
}

bool shown_scope(const ControllerScope& scope, const ControllerFilter& shown) {
  return scope.controllers.empty() ||
         std::any_of(scope.controllers.begin(), scope.controllers.end(), shown);
}

/// What pools may ask for beyond their flavor; scratch pools and networks kept for some
/// controllers only when `shown` lets one of them through.
wire::ShapeOffer shape_offer(const AgentConfig& config, const hypervisor::HostCapacity& host,
                             const ControllerFilter& shown) {
  wire::ShapeOffer offer;
  for (const auto& [arch, type] : host.virt_types) {
    offer.virt_types[os_arch_name(arch)] = std::string(hypervisor::to_string(type));
  }
  offer.nested_virtualization =
      config.extra_specs.nested_virtualization && host.nested_virtualization;
  offer.max_root_disk_gib = config.extra_specs.max_root_disk_gib;
  for (const auto& pool : config.scratch_pools) {
    if (shown_scope(pool.scope, shown)) {
      offer.scratch_pools.push_back({.name = pool.name, .max_disk_gib = pool.max_disk_gib});
    }
  }
  for (const auto& network : config.networks) {
    if (shown_scope(network.scope, shown)) {
      offer.networks.push_back(network.name);
    }
  }
  return offer;
}

wire::ResourceAmount amount_of(const Resources& r) {
  return wire::ResourceAmount{.vcpus = r.vcpus,
                              .memory_mib = r.memory_mib,
                              .instances = r.instances,
                              .disk_gib = r.disk_gib};
}

wire::ControllerShare share_answer(const ShareState& state) {
  wire::ControllerShare share{.controller = state.controller,
                              .used = amount_of(state.used),
                              .quota = amount_of(state.quota),
                              .reserved = amount_of(state.reserved),
                              .max_priority = state.max_priority,
                              .room = {},
                              .instances_bounded = state.instances_bounded,
                              .disk_bounded = state.disk_bounded};
  for (const auto& [priority, room] : state.room) {
    share.room[priority] = amount_of(room);
  }
  return share;
}

/// The controllers with a share to show: a [[quotas]] entry or something on the host.
std::set<std::string> controllers_with_shares(const AgentConfig& config,
                                              const CapacityReport& report) {
  std::set<std::string> controllers;
  for (const auto& quota : config.shares.quotas) {
    controllers.insert(quota.controller);
  }
  for (const auto& [controller, used] : report.usage.by_controller) {
    if (wire::is_uuid(controller)) {
      controllers.insert(ascii_lower(controller));
    }
  }
  return controllers;
}

/// The controllers capacity_answer shows something of their own to: every other controller
/// is shown what one `shown` that lets none through gives.
std::set<std::string> controllers_with_their_own(const AgentConfig& config,
                                                 const CapacityReport& report,
                                                 const CacheGenerations* caches) {
  std::set<std::string> controllers;
  if (caches != nullptr) {
    for (const auto& status : caches->statuses()) {
      controllers.insert(status.controller);
    }
  }
  for (const auto& warm : report.warm) {
    controllers.insert(warm.controller);
  }
  for (const auto& pool : config.scratch_pools) {
    controllers.insert(pool.scope.controllers.begin(), pool.scope.controllers.end());
  }
  for (const auto& network : config.networks) {
    controllers.insert(network.scope.controllers.begin(), network.scope.controllers.end());
  }
  controllers.merge(controllers_with_shares(config, report));
  return controllers;
}

}  // namespace

std::vector<wire::FlavorOffer> flavor_offers(const AgentConfig& config) {
  std::vector<wire::FlavorOffer> offers;
  for (const auto& flavor : config.flavors) {
    offers.push_back({.name = flavor.name,
                      .vcpus = flavor.vcpus,
                      .memory_mib = flavor.memory_mib,
                      .disk_gib = flavor.disk_gib});
  }
  return offers;
}

/// The configured images; those the agent pulls with where their pull stands.
std::vector<wire::ImageOffer> image_offers(const AgentConfig& config, const ImageBases* pulled) {
  std::vector<wire::ImageOffer> offers;
  for (const auto& image : config.images) {
    wire::ImageOffer offer{.name = image.name,
                           .os_type = image.os_type,
                           .os_name = image.os_name,
                           .os_version = image.os_version,
                           .arch = image.arch,
                           .state = "ready",
                           .pulled_bytes = 0,
                           .total_bytes = 0,
                           .error = ""};
    if (const auto pull = pulled != nullptr ? pulled->state(image.name) : std::nullopt) {
      const bool local_serves = !image.base_path.empty() || !image.base_volume.empty();
      offer.state = local_serves ? "ready" : offer_state(*pull);
      if (pull->phase != ImagePullState::Phase::ready) {
        offer.pulled_bytes = pull->bytes;
        offer.total_bytes = pull->total;
      }
      offer.error = pull->error;
    }
    offers.push_back(std::move(offer));
  }
  return offers;
}

wire::AgentCapacity capacity_answer(const AgentConfig& config, const CapacityReport& report,
                                    const ImageBases* images, const CacheGenerations* caches,
                                    const ControllerFilter& shown,
                                    const std::optional<std::string>& asking) {
  const auto amount = amount_of;
  wire::AgentCapacity answer{.agent_id = config.agent_id,
                             .version = GARM_EDGE_VERSION,
                             .machine = report.host.machine,
                             .cpus = report.host.cpus,
                             .memory_mib = report.host.memory_mib,
                             .limit = amount(report.limit),
                             .used = amount(report.used),
                             .free = amount(report.free),
                             .addresses = address_amount(report.addresses),
                             .draining = report.draining,
                             .instances_by_state = {},
                             .images = image_offers(config, images),
                             .flavors = flavor_offers(config),
                             .warm = {},
                             .caches = cache_offers(caches, shown),
                             .shapes = shape_offer(config, report.host, shown),
                             .share = std::nullopt,
                             .shares = {},
                             .features = wire::kAgentFeatures};
  const HostShares shares(
      config.shares, report.usage, report.limit,
      report.addresses ? std::optional<std::size_t>(report.addresses->free) : std::nullopt);
  if (asking) {
    // Unnamed: it is the asker's, and a hub answers for any controller without a share here
    // with one answer (placement_view's `others`).
    answer.share = share_answer(shares.share_of(*asking));
    answer.share->controller.clear();
  }
  for (const auto& controller : controllers_with_shares(config, report)) {
    if (shown(controller)) {
      answer.shares.push_back(share_answer(shares.share_of(controller)));
    }
  }
  for (const auto& [state, count] : report.by_state) {
    answer.instances_by_state[state] = count;
  }
  for (const auto& warm : report.warm) {
    if (!shown(warm.controller)) {
      continue;
    }
    answer.warm.push_back({.controller = warm.controller,
                           .image = warm.image,
                           .flavor = warm.flavor,
                           .ready = warm.ready,
                           .warming = warm.warming});
  }
  return answer;
}

wire::PlacementView placement_view(const AgentConfig& config, const CapacityReport& report,
                                   const ImageBases* images, const CacheGenerations* caches) {
  wire::PlacementView view;
  for (const auto& controller : controllers_with_their_own(config, report, caches)) {
    if (wire::is_uuid(controller)) {
      view.by_controller[ascii_lower(controller)] = capacity_answer(
          config, report, images, caches,
          [&](const std::string& owner) { return ascii_lower(owner) == ascii_lower(controller); },
          controller);
    }
  }
  // Any other controller has no quota, reservation or instance here: its share is one of those.
  // ("*" is no controller's ID: no domain counts for it, as none counts for those controllers.)
  view.others = capacity_answer(
      config, report, images, caches, [](const std::string&) { return false; }, std::string("*"));
  for (const auto& [controller, name] : report.instances) {
    if (auto key = wire::instance_key(controller, name); wire::is_instance_key(key)) {
      view.instances.push_back(std::move(key));
    }
  }
  std::sort(view.instances.begin(), view.instances.end());
  view.instances.erase(std::unique(view.instances.begin(), view.instances.end()),
                       view.instances.end());
  return view;
}

}  // namespace garm_edge::agent
