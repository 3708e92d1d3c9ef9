#include "agent/api/host_metrics.hpp"

#include <algorithm>
#include <optional>
#include <string_view>
#include <sys/statvfs.h>

#include "common/durable_file.hpp"
#include "common/prometheus_text.hpp"
#include "net/pki.hpp"

namespace garm_edge::agent {
namespace {

constexpr std::uint64_t kMib = 1024 * 1024;

/// max_instances = 0 and no guest address range: the host takes instances while vCPUs and
/// memory last.
bool has_instance_limit(const CapacityReport& report) {
  return report.limit.instances > 0;
}

void render_capacity(PrometheusText& text, const CapacityReport& report) {
  const std::pair<const char*, const Resources*> kinds[] = {
      {"limit", &report.limit}, {"used", &report.used}, {"free", &report.free}};
  text.family("garm_edge_capacity_vcpus", "gauge",
              "vCPUs the agent gives out (limit, with overcommit), takes and has free.");
  for (const auto& [kind, resources] : kinds) {
    text.sample("garm_edge_capacity_vcpus", {{"kind", kind}}, resources->vcpus);
  }
  text.family("garm_edge_capacity_memory_bytes", "gauge",
              "Memory the agent gives out (limit), takes and has free.");
  for (const auto& [kind, resources] : kinds) {
    text.sample("garm_edge_capacity_memory_bytes", {{"kind", kind}}, resources->memory_mib * kMib);
  }
  text.family("garm_edge_capacity_instances", "gauge",
              "Instances the agent may hold (limit), holds and may still create; limit and free "
              "only when max_instances or a guest address range bounds them.");
  for (const auto& [kind, resources] : kinds) {
    // Without a bound, a limit and a free count of 0 would read as a full host.
    if (!has_instance_limit(report) && std::string_view(kind) != "used") {
      continue;
    }
    text.sample("garm_edge_capacity_instances", {{"kind", kind}},
                static_cast<std::uint64_t>(resources->instances));
  }
  if (report.addresses) {
    text.family("garm_edge_guest_addresses", "gauge",
                "Guest addresses of the agent's range: held, resting after release, free.");
    text.sample("garm_edge_guest_addresses", {{"state", "held"}},
                static_cast<std::uint64_t>(report.addresses->held));
    text.sample("garm_edge_guest_addresses", {{"state", "resting"}},
                static_cast<std::uint64_t>(report.addresses->resting));
    text.sample("garm_edge_guest_addresses", {{"state", "free"}},
                static_cast<std::uint64_t>(report.addresses->free));
  }
  text.family("garm_edge_draining", "gauge", "1 while the host refuses creates (draining).");
  text.sample("garm_edge_draining", {}, std::uint64_t{report.draining ? 1u : 0u});
}

/// How many more guests of each flavor fit now: what a pool of that flavor can still get here.
void render_flavor_room(PrometheusText& text, const CapacityReport& report,
                        const std::vector<FlavorConfig>& flavors) {
  text.family("garm_edge_capacity_flavor_instances", "gauge",
              "How many more guests of the flavor fit now (vCPUs, memory, instance slots and "
              "guest addresses free).");
  for (const auto& flavor : flavors) {
    std::optional<std::uint64_t> room;
    const auto bound = [&room](std::uint64_t by) { room = std::min(room.value_or(by), by); };
    if (has_instance_limit(report)) {
      bound(report.free.instances);
    }
    if (flavor.vcpus > 0) {
      bound(report.free.vcpus / flavor.vcpus);
    }
    if (flavor.memory_mib > 0) {
      bound(report.free.memory_mib / flavor.memory_mib);
    }
    if (!room) {
      continue;  // nothing bounds it: no figure rather than a false 0
    }
    text.sample("garm_edge_capacity_flavor_instances", {{"flavor", flavor.name}}, *room);
  }
}

/// Each controller's use of the host, and the quota and reservation the operator set for it
/// (docs/shares.md): what a controller at its quota, or one starved of its share, shows.
void render_shares(PrometheusText& text, const CapacityReport& report, const SharesConfig& shares) {
  using Field = std::uint64_t Resources::*;
  const std::pair<const char*, Field> kFields[] = {{"vcpus", &Resources::vcpus},
                                                   {"memory_mib", &Resources::memory_mib},
                                                   {"disk_gib", &Resources::disk_gib}};
  const auto samples = [&](const char* name, const PrometheusText::LabelList& labels,
                           const Resources& amount, bool zero_is_none) {
    if (!zero_is_none || amount.instances != 0) {
      auto with = labels;
      with.emplace_back("resource", "instances");
      text.sample(name, with, static_cast<std::uint64_t>(amount.instances));
    }
    for (const auto& [resource, field] : kFields) {
      if (!zero_is_none || amount.*field != 0) {
        auto with = labels;
        with.emplace_back("resource", resource);
        text.sample(name, with, amount.*field);
      }
    }
  };
  text.family("garm_edge_controller_use", "gauge",
              "What each controller's instances, warm guests and creates under way take here.");
  for (const auto& [controller, used] : report.usage.by_controller) {
    samples("garm_edge_controller_use", {{"controller", controller}}, used, false);
  }
  text.family("garm_edge_controller_limit", "gauge",
              "The operator's [[quotas]] for a controller here: kind quota (at most) or reserved "
              "(kept for it).");
  for (const auto& quota : shares.quotas) {
    for (const auto& [kind, amount] :
         {std::pair{"quota", &quota.max}, std::pair{"reserved", &quota.reserved}}) {
      samples("garm_edge_controller_limit", {{"controller", quota.controller}, {"kind", kind}},
              share_resources(*amount), true);
    }
  }
}

void render_refusals(PrometheusText& text, const RefusalCounters& refusals) {
  text.family("garm_edge_create_refusals_total", "counter",
              "Creates refused before any work, by reason: capacity (the host is full), quota, "
              "reserved (for other controllers), priority (headroom for higher priorities).");
  for (const auto reason : kRefusalReasons) {
    text.sample("garm_edge_create_refusals_total", {{"reason", std::string(to_string(reason))}},
                refusals.of(reason));
  }
}

void render_disk(PrometheusText& text, const std::string& pool, const std::string& path) {
  struct statvfs space {};
  if (path.empty() || ::statvfs(path.c_str(), &space) != 0) {
    return;
  }
  text.family("garm_edge_storage_pool_bytes", "gauge",
              "The storage pool's file system: its size and what is free for the agent.");
  text.sample("garm_edge_storage_pool_bytes", {{"pool", pool}, {"kind", "size"}},
              static_cast<std::uint64_t>(space.f_blocks) * space.f_frsize);
  text.sample("garm_edge_storage_pool_bytes", {{"pool", pool}, {"kind", "free"}},
              static_cast<std::uint64_t>(space.f_bavail) * space.f_frsize);
}

}  // namespace

std::string render_host_metrics(InstanceService& service) {
  PrometheusText text;
  const auto health = service.health();
  text.family("garm_edge_libvirt_up", "gauge", "1 when libvirt answers the agent.");
  text.sample("garm_edge_libvirt_up", {}, std::uint64_t{health.reachable ? 1u : 0u});
  render_refusals(text, service.refusals());
  if (!health.reachable) {
    return text.str();
  }
  try {
    const auto report = service.capacity();
    render_capacity(text, report);
    render_flavor_room(text, report, service.config().flavors);
    render_shares(text, report, service.config().shares);
    const auto& pool = service.config().storage_pool;
    render_disk(text, pool, service.storage_pool_path());
  } catch (const std::exception&) {
    // libvirt went away between the two calls: the next scrape says so.
  }
  return text.str();
}

std::string render_certificate_metrics(const std::vector<WatchedCertificate>& certificates) {
  PrometheusText text;
  text.family("garm_edge_certificate_expiry_timestamp_seconds", "gauge",
              "When a certificate the agent serves or trusts expires (Unix time).");
  for (const auto& certificate : certificates) {
    try {
      const auto facts = net::certificate_facts(read_file(certificate.path).value_or(""));
      text.sample("garm_edge_certificate_expiry_timestamp_seconds",
                  {{"certificate", certificate.name}},
                  static_cast<std::uint64_t>(std::max<std::int64_t>(0, facts.not_after_unix)));
    } catch (const std::exception&) {
      continue;
    }
  }
  return text.str();
}

}  // namespace garm_edge::agent
