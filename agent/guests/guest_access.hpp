#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "agent/base/config.hpp"
#include "agent/base/log.hpp"
#include "agent/guests/guest_network.hpp"
#include "agent/instances/guest_side.hpp"
#include "agent/instances/instance_store.hpp"
#include "agent/runner_archives/archive_fetcher.hpp"
#include "hypervisor/hypervisor.hpp"
#include "userdata/userdata.hpp"
#include "wire/bootstrap.hpp"

namespace garm_edge::agent {

/// The guest side of creating and deleting instances. `start` checks the host once (network,
/// address range, filters) and fails with a clear message when guests could not be served.
/// Where the guest's runner archive comes from, for the cache.
ArchiveSource archive_source_of(const GuestRecord& guest);

/// The path under the guest service where a guest downloads the runner archive `sha256`.
std::string runner_archive_path(const std::string& sha256);

class GuestAccess {
 public:
  GuestAccess(const AgentConfig& config, hypervisor::Hypervisor& hypervisor, Logger& log);

  /// Resolves the network, the service address and the reservable range; defines the
  /// anti-spoofing filter when needed. Throws GuestSetupError, or HypervisorError when libvirt
  /// fails.
  void start();
  /// The port guests are told (the bound one when the config says 0).
  void set_port(std::uint16_t port) { port_ = port; }
  const std::string& address() const { return address_; }
  std::uint16_t port() const { return port_; }
  /// http://address:port
  std::string base_url() const;
  /// The registry mirror as guests reach it (the guest service, /v2/); empty without [mirror].
  std::string mirror_url() const;

  /// Everything `bootstrap`'s guest needs but its address; nothing is reserved. Throws
  /// userdata::UserDataError for a bootstrap that cannot become user-data.
  GuestPlan plan(const InstanceRecord& record, const wire::BootstrapInstance& bootstrap);
  /// See GuestSide::bind.
  GuestBinding bind(const InstanceRecord& warm, const wire::BootstrapInstance& bootstrap);
  /// Points `guest` at garm's URLs, token and CA bundle from `bootstrap`, and at the runner
  /// archive the cache can hold; returns the endpoints the guest's scripts are given.
  userdata::GuestEndpoints attach_garm(GuestRecord& guest,
                                       const wire::BootstrapInstance& bootstrap) const;
  /// Picks the guest's address: one neither reserved in the network nor in `taken` (held by
  /// instances whose reservation may not be made yet) nor resting. Throws ServiceError
  /// (no_capacity, so placement tries another agent) when there is none.
  void assign_address(GuestPlan& plan, const std::set<std::string>& taken);
  /// The range's addresses: held (reserved in the network or in `taken`), resting and free.
  /// Throws HypervisorError.
  AddressCount count_addresses(const std::set<std::string>& taken);
  /// Adds the plan's DHCP reservation. Throws HypervisorError.
  void reserve(const GuestRecord& guest);
  /// Removes its DHCP reservation, if any; its address rests before it is handed out again.
  void release(const GuestRecord& guest);
  /// Removes reservations in the agent's address range that no instance holds (a create
  /// interrupted between reserving and recording cannot happen: the record comes first, but
  /// a record removed by hand can). Returns how many.
  std::size_t release_unheld(const std::set<std::string>& held);

 private:
  const AgentConfig& config_;
  hypervisor::Hypervisor& hypervisor_;
  Logger& log_;
  std::string address_;
  std::uint16_t port_ = 0;
  AddressRange range_;
  std::string filter_;  // nwfilter bound to guest interfaces; empty: none
  AddressAllocator allocator_{config_.guests.address_quarantine};
};

}  // namespace garm_edge::agent
