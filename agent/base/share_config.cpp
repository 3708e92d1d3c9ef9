// [[quotas]] and [headroom] in agent.toml: how the controllers that share this host share it
// (docs/shares.md).
#include "agent/base/share_config.hpp"

#include <algorithm>
#include <tuple>

#include "agent/base/config_sections.hpp"
#include "wire/validate.hpp"

namespace garm_edge::agent {
namespace {

constexpr std::int64_t kMaxAmount = std::int64_t{1} << 40;

ShareAmount read_amount(TomlTableReader& in, std::string_view prefix) {
  const auto field = [&](std::string_view name) {
    return in.integer<std::uint64_t>(std::string(prefix) + std::string(name), 0, kMaxAmount)
        .value_or(0);
  };
  return {.instances = field("instances"),
          .vcpus = field("vcpus"),
          .memory_mib = field("memory_mib"),
          .disk_gib = field("disk_gib")};
}

/// The first field where `low` is above `high`, by name; empty when none is. `zero_is_none`:
/// a `high` field 0 bounds nothing.
std::string first_above(const ShareAmount& low, const ShareAmount& high, bool zero_is_none) {
  for (const auto& [name, a, b] : {std::tuple{"instances", low.instances, high.instances},
                                   std::tuple{"vcpus", low.vcpus, high.vcpus},
                                   std::tuple{"memory_mib", low.memory_mib, high.memory_mib},
                                   std::tuple{"disk_gib", low.disk_gib, high.disk_gib}}) {
    if ((b != 0 || !zero_is_none) && a > b) {
      return name;
    }
  }
  return "";
}

}  // namespace

QuotaConfig read_quota(const toml::table& table, const std::string& source, std::size_t index) {
  TomlTableReader in(table, source, "[[quotas]] #" + std::to_string(index + 1));
  QuotaConfig quota;
  quota.controller = ascii_lower(in.required_string("controller"));
  if (!wire::is_uuid(quota.controller)) {
    in.fail(in.node("controller"), "controller must be a garm controller's UUID");
  }
  quota.max = read_amount(in, "max_");
  quota.reserved = read_amount(in, "reserved_");
  if (const auto above = first_above(quota.reserved, quota.max, true); !above.empty()) {
    in.fail(nullptr, "reserved_" + above + " is more than max_" + above +
                         ": a controller cannot be kept more than it may take");
  }
  quota.max_priority = enum_or_fail(in, "max_priority", quota.max_priority);
  in.reject_unknown_keys();
  return quota;
}

void read_headroom_section(TomlTableReader& root, SharesConfig& shares) {
  const auto* table = root.table("headroom");
  if (table == nullptr) {
    return;
  }
  TomlTableReader in(*table, root.source(), "[headroom]");
  for (auto [key, amount] :
       {std::pair{"low", &shares.headroom.low}, std::pair{"normal", &shares.headroom.normal}}) {
    if (const auto* entry = in.table(key)) {
      TomlTableReader part(*entry, root.source(), std::string("[headroom.") + key + "]");
      *amount = read_amount(part, "");
      part.reject_unknown_keys();
    }
  }
  in.reject_unknown_keys();
  // A normal create refused where a low one fits would turn priority upside down.
  if (const auto above = first_above(shares.headroom.normal, shares.headroom.low, false);
      !above.empty()) {
    in.fail(nullptr, "normal." + above + " is more than low." + above +
                         ": low-priority creates must leave at least what normal ones leave");
  }
}

const QuotaConfig* SharesConfig::find(std::string_view controller) const {
  const auto found = std::find_if(quotas.begin(), quotas.end(),
                                  [&](const QuotaConfig& q) { return q.controller == controller; });
  return found == quotas.end() ? nullptr : &*found;
}

ShareAmount SharesConfig::headroom_of(wire::Priority priority) const {
  switch (priority) {
    case wire::Priority::low:
      return headroom.low;
    case wire::Priority::normal:
      return headroom.normal;
    default:
      return {};
  }
}

}  // namespace garm_edge::agent
