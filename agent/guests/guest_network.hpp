#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>

#include "agent/instances/capacity.hpp"
#include "agent/instances/identifiers.hpp"  // random_mac
#include "hypervisor/hypervisor.hpp"

namespace garm_edge::agent {

/// The host cannot serve guests as configured (network, address range, filters): the agent
/// does not start. The message says what to change.
class GuestSetupError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// IPv4 addresses in host order, first to last inclusive.
struct AddressRange {
  std::uint32_t first = 0;
  std::uint32_t last = 0;

  bool contains(std::uint32_t address) const { return address >= first && address <= last; }
};

std::optional<std::uint32_t> parse_ipv4(std::string_view text);
std::string format_ipv4(std::uint32_t address);

/// The addresses the agent may reserve for guests: `configured` ("first-last", inside the
/// network's subnet), or else the subnet minus its network, broadcast and gateway addresses
/// and minus the DHCP ranges dnsmasq hands out on its own. Throws GuestSetupError saying
/// what to change.
AddressRange reservable_addresses(const hypervisor::NetworkInfo& network,
                                  std::string_view configured);

/// The MAC every guest at `address` gets: garm-edge's locally administered block 52:47:45 and
/// the address's low three bytes. One MAC per address means a new guest takes over the lease
/// dnsmasq still keeps for the address's last guest (it keeps leases for the network's lease
/// time and will not give a leased address to another MAC), and it needs no state to survive
/// restarts.
std::string mac_for_address(std::uint32_t address);

/// Chooses guests' addresses. An address given back rests for `quarantine` before it is handed
/// out again (docs/guests.md says what the rest is for).
class AddressAllocator {
 public:
  explicit AddressAllocator(std::chrono::seconds quarantine) : quarantine_(quarantine) {}

  /// The lowest address of `range` that is neither reserved in `network`, nor in `taken`, nor
  /// resting. Nothing when the range is full.
  std::optional<std::string> pick(const AddressRange& range, const hypervisor::NetworkInfo& network,
                                  const std::set<std::string>& taken);
  /// How many addresses of `range` are held (reserved in `network` or in `taken`), resting and
  /// free: pick() finds one exactly when `free` is not 0.
  AddressCount count(const AddressRange& range, const hypervisor::NetworkInfo& network,
                     const std::set<std::string>& taken);
  /// `address` rests before pick() hands it out again.
  void release(const std::string& address);

 private:
  void forget_rested_locked();

  std::chrono::seconds quarantine_;
  std::mutex mutex_;
  std::map<std::string, std::chrono::steady_clock::time_point> released_;
};

}  // namespace garm_edge::agent
