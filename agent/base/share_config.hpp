#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "wire/enums.hpp"

namespace garm_edge::agent {

/// An amount of each resource a share counts (docs/shares.md); a field 0: not bounded by it.
struct ShareAmount {
  std::uint64_t instances = 0;
  std::uint64_t vcpus = 0;
  std::uint64_t memory_mib = 0;
  std::uint64_t disk_gib = 0;

  bool operator==(const ShareAmount&) const = default;
};

/// `[[quotas]]`: one controller's share of this host.
struct QuotaConfig {
  std::string controller;  // a UUID, lower case
  ShareAmount max;         // never more than this for it, warm guests included
  ShareAmount reserved;    // other controllers' creates leave what it does not use of this
  wire::Priority max_priority = wire::Priority::high;
};

/// `[headroom]`: room kept free of lower-priority creates.
struct HeadroomConfig {
  ShareAmount low;     // low-priority creates leave this free (for normal and high ones)
  ShareAmount normal;  // normal-priority creates leave this free (for high ones)

  bool operator==(const HeadroomConfig&) const = default;
};

struct SharesConfig {
  std::vector<QuotaConfig> quotas;
  HeadroomConfig headroom;

  const QuotaConfig* find(std::string_view controller) const;
  /// The room `priority` leaves free.
  ShareAmount headroom_of(wire::Priority priority) const;
};

}  // namespace garm_edge::agent
