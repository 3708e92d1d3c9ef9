#pragma once

// [guests] and [[warm]] of agent.toml (read in guest_config.cpp).

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

namespace garm_edge::agent {

/// How a guest proves which instance it is, on top of its unguessable token.
enum class AntiSpoofing {
  automatic,      // clean-traffic where the host has it, else source_ip; fails where neither works
  clean_traffic,  // libvirt's stock filter (MAC, IP and ARP spoofing)
  source_ip,      // the agent's own filter: IPv4 only from the reserved address
  off,            // no filter: any guest on the network can claim another's address
};

/// The plain-HTTP service guests reach at first boot: their NoCloud seed and garm's
/// callback and metadata endpoints.
struct GuestConfig {
  bool enabled = false;  // a [guests] section is present
  /// Where the service listens, and the host part of the URLs guests are given. Empty: the
  /// network's gateway address (the host's own address on the guests' bridge).
  std::string address;
  std::uint16_t port = 8775;
  /// relay: guests call the agent, which forwards to garm; direct: guests call garm.
  bool relay = true;
  /// Addresses the agent reserves for guests, "first-last". Empty: the network's subnet
  /// outside its DHCP ranges.
  std::string addresses;
  AntiSpoofing anti_spoofing = AntiSpoofing::automatic;
  std::chrono::seconds relay_timeout{30};
  std::size_t max_connections = 512;
  /// How long a deleted guest's address rests before another guest gets it. ARP and DHCP need
  /// no rest (every guest at an address has its MAC); the guest service's state per source
  /// address does: a guest that guessed tokens is refused for up to 60 s, and its successor
  /// must not inherit that (docs/guests.md).
  std::chrono::seconds address_quarantine{60};
  /// The runner archive cache under `<state_dir>/runner-archives`: each archive downloaded once
  /// per host and served to guests. 0: off (guests download from garm's URL themselves).
  std::uint64_t runner_cache_mib = 4096;
  std::chrono::seconds runner_download_timeout{900};
};

/// Guests of one image and flavor kept booted ahead of demand for one garm controller
/// (docs/warm-guests.md).
struct WarmConfig {
  /// The controller (a UUID) whose creates alone may take these guests: whatever a guest was
  /// prepared with for one controller never reaches another's instance. Read from the entry, or
  /// the one controller [[api.clients]] name when the agent serves only one.
  std::string controller;
  std::string image;
  std::string flavor;
  std::size_t count = 1;
  /// Further guests kept saved to disk beside the `count` running ones: each boots, becomes
  /// ready, and is then saved (its memory in a file, its QEMU gone); binding one restores it.
  std::size_t saved = 0;
  /// A warm guest not ready this long after it was created is destroyed (and counted wasted).
  std::chrono::seconds ready_timeout{900};
  std::string name;  // "image/flavor for <controller>", unique among [[warm]] entries
};

}  // namespace garm_edge::agent
