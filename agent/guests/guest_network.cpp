#include "agent/guests/guest_network.hpp"

#include <algorithm>
#include <arpa/inet.h>
#include <array>
#include <stdexcept>
#include <vector>

#include "common/hex.hpp"
#include "common/text.hpp"
#include "net/random.hpp"

namespace garm_edge::agent {

std::optional<std::uint32_t> parse_ipv4(std::string_view text) {
  in_addr parsed{};
  if (text.size() > 15 || ::inet_pton(AF_INET, std::string(text).c_str(), &parsed) != 1) {
    return std::nullopt;
  }
  return ntohl(parsed.s_addr);
}

std::string format_ipv4(std::uint32_t address) {
  return std::to_string(address >> 24U) + "." + std::to_string((address >> 16U) & 0xFFU) + "." +
         std::to_string((address >> 8U) & 0xFFU) + "." + std::to_string(address & 0xFFU);
}

namespace {

AddressRange subnet_of(const hypervisor::NetworkInfo& network) {
  const auto gateway = parse_ipv4(network.gateway);
  if (!gateway || network.prefix < 8 || network.prefix > 30) {
    throw GuestSetupError("network " + network.name +
                          " has no IPv4 subnet between /8 and /30 the agent can use");
  }
  const std::uint32_t mask = ~((1U << (32U - network.prefix)) - 1U);
  const std::uint32_t base = *gateway & mask;
  return {.first = base + 1, .last = (base | ~mask) - 1};
}

AddressRange parse_configured(std::string_view configured, const AddressRange& subnet,
                              const std::string& network) {
  const auto dash = configured.find('-');
  const auto first = parse_ipv4(configured.substr(0, dash));
  const auto last =
      dash == std::string_view::npos ? std::nullopt : parse_ipv4(configured.substr(dash + 1));
  if (!first || !last || *first > *last) {
    throw GuestSetupError("[guests] addresses \"" + printable_excerpt(configured) +
                          "\" must be \"first-last\", two IPv4 addresses in order");
  }
  if (!subnet.contains(*first) || !subnet.contains(*last)) {
    throw GuestSetupError("[guests] addresses \"" + printable_excerpt(configured) +
                          "\" are not all inside network " + network + "'s subnet");
  }
  return {.first = *first, .last = *last};
}

/// The gateway and the DHCP ranges, clipped to the subnet, in order.
std::vector<AddressRange> excluded_runs(const hypervisor::NetworkInfo& network,
                                        const AddressRange& subnet) {
  std::vector<AddressRange> excluded;
  if (const auto gateway = parse_ipv4(network.gateway)) {
    excluded.push_back({.first = *gateway, .last = *gateway});
  }
  for (const auto& range : network.ranges) {
    const auto start = parse_ipv4(range.start);
    const auto end = parse_ipv4(range.end);
    if (start && end && *start <= *end) {
      excluded.push_back(
          {.first = std::max(*start, subnet.first), .last = std::min(*end, subnet.last)});
    }
  }
  std::sort(excluded.begin(), excluded.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  return excluded;
}

}  // namespace

AddressRange reservable_addresses(const hypervisor::NetworkInfo& network,
                                  std::string_view configured) {
  const auto subnet = subnet_of(network);
  if (!configured.empty()) {
    return parse_configured(configured, subnet, network.name);
  }
  // The longest run of the subnet that dnsmasq does not hand out dynamically.
  std::optional<AddressRange> best;
  const auto consider = [&best](std::uint64_t first, std::uint64_t last) {
    if (!best || last - first > std::uint64_t{best->last} - best->first) {
      best = AddressRange{.first = static_cast<std::uint32_t>(first),
                          .last = static_cast<std::uint32_t>(last)};
    }
  };
  std::uint64_t next_free = subnet.first;
  for (const auto& run : excluded_runs(network, subnet)) {
    if (run.first > next_free) {
      consider(next_free, run.first - 1);
    }
    next_free = std::max<std::uint64_t>(next_free, std::uint64_t{run.last} + 1);
  }
  if (next_free <= subnet.last) {
    consider(next_free, subnet.last);
  }
  if (!best) {
    throw GuestSetupError(
        "network " + network.name +
        " hands out its whole subnet by DHCP: shrink its DHCP range or set [guests] addresses");
  }
  return *best;
}

namespace {

std::string mac_with(std::string_view prefix, const std::array<unsigned char, 3>& bytes) {
  std::string mac(prefix);
  for (const unsigned char byte : bytes) {
    mac += ':';
    append_hex(mac, byte);
  }
  return mac;
}

}  // namespace

std::string mac_for_address(std::uint32_t address) {
  return mac_with("52:47:45",
                  {static_cast<unsigned char>(address >> 16U),
                   static_cast<unsigned char>(address >> 8U), static_cast<unsigned char>(address)});
}

namespace {

/// Addresses reserved in `network` or chosen for instances in `taken`.
std::set<std::string> held_addresses(const hypervisor::NetworkInfo& network,
                                     const std::set<std::string>& taken) {
  std::set<std::string> held(taken.begin(), taken.end());
  for (const auto& host : network.hosts) {
    held.insert(host.ip);
  }
  return held;
}

bool in_range(const AddressRange& range, const std::string& address) {
  const auto parsed = parse_ipv4(address);
  return parsed && range.contains(*parsed);
}

}  // namespace

std::optional<std::string> AddressAllocator::pick(const AddressRange& range,
                                                  const hypervisor::NetworkInfo& network,
                                                  const std::set<std::string>& taken) {
  std::lock_guard lock(mutex_);
  forget_rested_locked();
  const auto held = held_addresses(network, taken);
  for (std::uint64_t a = range.first; a <= range.last; ++a) {
    auto candidate = format_ipv4(static_cast<std::uint32_t>(a));
    if (held.count(candidate) == 0 && released_.count(candidate) == 0) {
      return candidate;
    }
  }
  return std::nullopt;
}

AddressCount AddressAllocator::count(const AddressRange& range,
                                     const hypervisor::NetworkInfo& network,
                                     const std::set<std::string>& taken) {
  std::lock_guard lock(mutex_);
  forget_rested_locked();
  const auto held = held_addresses(network, taken);
  AddressCount count;
  count.total = std::size_t{range.last - range.first} + 1;
  count.held = static_cast<std::size_t>(std::count_if(
      held.begin(), held.end(), [&](const auto& address) { return in_range(range, address); }));
  count.resting = static_cast<std::size_t>(
      std::count_if(released_.begin(), released_.end(), [&](const auto& entry) {
        return in_range(range, entry.first) && held.count(entry.first) == 0;
      }));
  count.free = count.total - count.held - count.resting;
  return count;
}

void AddressAllocator::release(const std::string& address) {
  std::lock_guard lock(mutex_);
  released_[address] = std::chrono::steady_clock::now();
}

void AddressAllocator::forget_rested_locked() {
  const auto now = std::chrono::steady_clock::now();
  std::erase_if(released_, [&](const auto& entry) { return now - entry.second >= quarantine_; });
}

}  // namespace garm_edge::agent
