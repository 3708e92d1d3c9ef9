#include "agent/guests/guest_access.hpp"

#include <algorithm>
#include <cctype>
#include <stdexcept>

#include "agent/instances/cache_generations.hpp"
#include "agent/instances/service_error.hpp"
#include "agent/instances/warm_spec.hpp"
#include "common/text.hpp"
#include "net/secret_token.hpp"
#include "userdata/userdata.hpp"
#include "wire/validate.hpp"

namespace garm_edge::agent {
namespace {

userdata::GuestDevices guest_devices(const InstanceRecord& record) {
  userdata::GuestDevices devices;
  for (const auto& disk : record.caches) {
    devices.caches.push_back({.serial = disk.serial, .path = disk.mount});
  }
  for (const auto& disk : record.scratch_disks) {
    devices.scratch.push_back({.serial = disk.serial, .path = disk.mount});
  }
  for (const auto& nic : record.extra_nics) {
    devices.extra_nic_macs.push_back(nic.mac);
  }
  return devices;
}

constexpr const char* kCleanTraffic = "clean-traffic";
constexpr const char* kSourceIpFilter = "garm-edge-source-ip";

/// garm's instance-facing URL layout, which the relay serves under the agent's address.
constexpr const char* kCallbackPath = "/api/v1/callbacks";
constexpr const char* kMetadataPath = "/api/v1/metadata";

/// garm's tool for the guest, if the cache can hold it: it needs the SHA-256 to name and
/// verify the archive.
std::optional<RunnerArchiveRecord> cacheable_runner_archive(
    const wire::BootstrapInstance& bootstrap) {
  const wire::RunnerApplicationDownload* tool = nullptr;
  try {
    tool = &userdata::select_tool(bootstrap);
  } catch (const userdata::UserDataError&) {
    return std::nullopt;  // the installer reports it, if it needs a tool at all
  }
  const auto sha256 = ascii_lower(tool->sha256_checksum.value_or(""));
  const auto url = tool->download_url.value_or("");
  if (sha256.size() != 64 || sha256.find_first_not_of("0123456789abcdef") != std::string::npos ||
      !wire::is_http_url(url)) {
    return std::nullopt;
  }
  return RunnerArchiveRecord{.download_url = url,
                             .sha256 = sha256,
                             .temp_download_token = tool->temp_download_token.value_or(""),
                             .http_proxy = bootstrap.proxy_config.http_proxy,
                             .https_proxy = bootstrap.proxy_config.https_proxy,
                             .no_proxy = bootstrap.proxy_config.no_proxy};
}

}  // namespace

ArchiveSource archive_source_of(const GuestRecord& guest) {
  const auto& archive = guest.runner_archive.value();
  return {.url = archive.download_url,
          .sha256 = archive.sha256,
          .bearer_token = archive.temp_download_token,
          .ca_bundle = guest.ca_cert_bundle,
          .proxies = {.http_proxy = archive.http_proxy,
                      .https_proxy = archive.https_proxy,
                      .no_proxy = archive.no_proxy}};
}

std::string runner_archive_path(const std::string& sha256) {
  return "/runner-archives/" + sha256;
}

GuestAccess::GuestAccess(const AgentConfig& config, hypervisor::Hypervisor& hypervisor, Logger& log)
    : config_(config), hypervisor_(hypervisor), log_(log), port_(config.guests.port) {}

void GuestAccess::start() {
  const auto network = hypervisor_.network(config_.network);
  address_ = config_.guests.address.empty() ? network.gateway : config_.guests.address;
  if (!parse_ipv4(address_)) {
    throw GuestSetupError("network " + config_.network +
                          " has no IPv4 address for the guest service; set [guests] address");
  }
  range_ = reservable_addresses(network, config_.guests.addresses);
  switch (config_.guests.anti_spoofing) {
    case AntiSpoofing::off:
      log_.warning("[guests] anti_spoofing is off: a guest can take another guest's address");
      break;
    case AntiSpoofing::clean_traffic:
      if (!hypervisor_.has_filter(kCleanTraffic)) {
        throw GuestSetupError(
            "nwfilter clean-traffic is not defined (install libvirt-daemon-config-nwfilter) ");
      }
      filter_ = kCleanTraffic;
      break;
    case AntiSpoofing::source_ip:
      hypervisor_.define_source_ip_filter(kSourceIpFilter);
      filter_ = kSourceIpFilter;
      break;
    case AntiSpoofing::automatic:
      try {
        if (hypervisor_.has_filter(kCleanTraffic)) {
          filter_ = kCleanTraffic;
        } else {
          hypervisor_.define_source_ip_filter(kSourceIpFilter);
          filter_ = kSourceIpFilter;
        }
      } catch (const hypervisor::HypervisorError& e) {
        throw hypervisor::HypervisorError(
            e.kind(),
            std::string(
                "guests need an anti-spoofing nwfilter and this libvirt cannot define one (") +
                e.what() +
                "); set [guests] anti_spoofing = \"off\" only where guests cannot reach each "
                "other");
      }
      break;
  }
  log_.info("guest service for network " + config_.network + " at " + address_ + ", addresses " +
            format_ipv4(range_.first) + "-" + format_ipv4(range_.last) +
            (filter_.empty() ? ", no nwfilter" : ", nwfilter " + filter_));
}

std::string GuestAccess::base_url() const {
  return "http://" + address_ + ":" + std::to_string(port_);
}

userdata::GuestEndpoints GuestAccess::attach_garm(GuestRecord& guest,
                                                  const wire::BootstrapInstance& bootstrap) const {
  guest.bearer_token_hash = net::sha256_hex(bootstrap.instance_token);
  guest.callback_url = bootstrap.callback_url;
  guest.metadata_url = bootstrap.metadata_url;
  guest.ca_cert_bundle = bootstrap.ca_cert_bundle.value_or("");
  auto endpoints =
      config_.guests.relay
          ? userdata::GuestEndpoints{base_url() + kCallbackPath, base_url() + kMetadataPath}
          : userdata::GuestEndpoints{bootstrap.callback_url, bootstrap.metadata_url};
  guest.runner_archive.reset();
  if (config_.guests.runner_cache_mib > 0) {
    guest.runner_archive = cacheable_runner_archive(bootstrap);
    if (guest.runner_archive) {
      endpoints.runner_archive_url = base_url() + runner_archive_path(guest.runner_archive->sha256);
      endpoints.runner_archive_sha256 = guest.runner_archive->sha256;
    }
  }
  return endpoints;
}

std::string GuestAccess::mirror_url() const {
  return config_.mirror.enabled ? base_url() : std::string();
}

GuestPlan GuestAccess::plan(const InstanceRecord& record,
                            const wire::BootstrapInstance& bootstrap) {
  GuestPlan plan;
  auto& guest = plan.record;
  guest.network = config_.network;
  guest.mac = random_mac();
  const auto seed_token = net::random_token();
  guest.seed_token_hash = net::sha256_hex(seed_token);
  const auto endpoints = attach_garm(guest, bootstrap);

  if (record.controller_id == kCacheBuilderControllerId) {
    // Its user-data is the builder's own (InstanceService::create_builder): nothing of garm's.
    guest.meta_data = userdata::render_meta_data(record.domain_uuid, record.name);
  } else if (record.controller_id == kWarmControllerId) {
    // No garm yet: its install script is the warm one, and its "instance token" its own.
    const userdata::WarmGuestValues warm{
        .agent_url = base_url(),
        .token = bootstrap.instance_token,
        .archive_url = endpoints.runner_archive_url,
        .archive_sha256 = guest.runner_archive ? guest.runner_archive->sha256 : ""};
    guest.meta_data = userdata::render_meta_data(record.domain_uuid, record.name);
    guest.user_data = userdata::render_linux_cloud_config(
        bootstrap, userdata::warm_guest_script(warm), {}, {}, mirror_url());
  } else {
    auto seed = userdata::render_seed(bootstrap, {.instance_id = record.domain_uuid,
                                                  .hostname = record.name,
                                                  .endpoints = endpoints,
                                                  .devices = guest_devices(record),
                                                  .mirror_url = mirror_url()});
    guest.meta_data = std::move(seed.meta_data);
    guest.user_data = std::move(seed.user_data);
    guest.vendor_data = std::move(seed.vendor_data);
  }

  // cloud-init 22.4 needs nocloud-net for an http seed, and the trailing slash.
  plan.smbios_serial = "ds=nocloud-net;s=" + base_url() + "/" + seed_token + "/";
  plan.interface = {
      .network = config_.network, .bridge = "", .mac = guest.mac, .filter = "", .filter_ip = ""};
  return plan;
}

GuestBinding GuestAccess::bind(const InstanceRecord& warm,
                               const wire::BootstrapInstance& bootstrap) {
  GuestBinding binding{.guest = warm.guest.value_or(GuestRecord{}), .assignment = ""};
  auto& guest = binding.guest;
  const auto endpoints = attach_garm(guest, bootstrap);
  guest.closed = false;
  guest.runner_status.clear();
  guest.agent_id.reset();
  guest.os_name.clear();
  guest.os_version.clear();
  guest.messages.clear();
  binding.assignment = userdata::render_linux_assignment(
      bootstrap, endpoints, userdata::install_script(bootstrap, endpoints),
      guest.runner_archive ? guest.runner_archive->sha256 : "");
  return binding;
}

void GuestAccess::assign_address(GuestPlan& plan, const std::set<std::string>& taken) {
  const auto network = hypervisor_.network(config_.network);
  const auto ip = allocator_.pick(range_, network, taken);
  if (!ip) {
    // The host is full for now, as when its memory is: the fleet places the runner elsewhere.
    const auto count = allocator_.count(range_, network, taken);
    throw ServiceError(
        ServiceError::Code::no_capacity,
        "agent " + config_.agent_id + " has no free guest address in " + format_ipv4(range_.first) +
            "-" + format_ipv4(range_.last) + ": " + std::to_string(count.held) + " held, " +
            std::to_string(count.resting) + " resting for up to " +
            std::to_string(config_.guests.address_quarantine.count()) + " s after a delete");
  }
  plan.record.ip = *ip;
  plan.record.mac = mac_for_address(*parse_ipv4(*ip));
  plan.interface.mac = plan.record.mac;
  if (!filter_.empty()) {
    plan.interface.filter = filter_;
    plan.interface.filter_ip = *ip;
  }
}

AddressCount GuestAccess::count_addresses(const std::set<std::string>& taken) {
  return allocator_.count(range_, hypervisor_.network(config_.network), taken);
}

void GuestAccess::reserve(const GuestRecord& guest) {
  if (!guest.ip.empty()) {
    hypervisor_.add_dhcp_host(guest.network, {.mac = guest.mac, .ip = guest.ip});
  }
}

void GuestAccess::release(const GuestRecord& guest) {
  if (guest.ip.empty()) {
    return;
  }
  hypervisor_.remove_dhcp_host(guest.network, {.mac = guest.mac, .ip = guest.ip});
  allocator_.release(guest.ip);
}

}  // namespace garm_edge::agent

namespace garm_edge::agent {

std::size_t GuestAccess::release_unheld(const std::set<std::string>& held) {
  std::size_t released = 0;
  for (const auto& host : hypervisor_.network(config_.network).hosts) {
    const auto address = parse_ipv4(host.ip);
    if (address && range_.contains(*address) && held.count(host.ip) == 0) {
      hypervisor_.remove_dhcp_host(config_.network, host);
      log_.warning("reconcile: released reservation " + host.ip + " for " + host.mac +
                   ", which no instance holds");
      ++released;
    }
  }
  return released;
}

}  // namespace garm_edge::agent
