#include "agent/base/guest_config.hpp"

#include "agent/base/config_sections.hpp"

namespace garm_edge::agent {

namespace {

using TableReader = TomlTableReader;

AntiSpoofing anti_spoofing_or_fail(TableReader& in) {
  const auto text = in.string("anti_spoofing").value_or("auto");
  if (text == "auto") {
    return AntiSpoofing::automatic;
  }
  if (text == "clean-traffic") {
    return AntiSpoofing::clean_traffic;
  }
  if (text == "source-ip") {
    return AntiSpoofing::source_ip;
  }
  if (text == "off") {
    return AntiSpoofing::off;
  }
  in.fail(in.node("anti_spoofing"),
          "anti_spoofing must be one of auto, clean-traffic, source-ip, off");
}

}  // namespace

void read_guests_section(TableReader& root, AgentConfig& config) {
  const auto* table = root.table("guests");
  if (table == nullptr) {
    return;
  }
  TableReader in(*table, root.source(), "[guests]");
  auto& guests = config.guests;
  guests.enabled = true;
  guests.address = in.string("address").value_or("");
  guests.port = in.integer<std::uint16_t>("port", 0, 65535).value_or(guests.port);
  const auto mode = in.string("mode").value_or("relay");
  if (mode != "relay" && mode != "direct") {
    in.fail(in.node("mode"), "mode must be relay or direct");
  }
  guests.relay = mode == "relay";
  guests.addresses = in.string("addresses").value_or("");
  guests.anti_spoofing = anti_spoofing_or_fail(in);
  guests.relay_timeout = std::chrono::seconds(
      in.integer<long>("relay_timeout_seconds", 1, 600).value_or(guests.relay_timeout.count()));
  guests.max_connections =
      in.integer<std::size_t>("max_connections", 1, 65536).value_or(guests.max_connections);
  guests.address_quarantine =
      std::chrono::seconds(in.integer<long>("address_quarantine_seconds", 0, 86400)
                               .value_or(guests.address_quarantine.count()));
  guests.runner_cache_mib =
      in.integer<std::uint64_t>("runner_cache_mib", 0, 1U << 24U).value_or(guests.runner_cache_mib);
  guests.runner_download_timeout =
      std::chrono::seconds(in.integer<long>("runner_download_timeout_seconds", 10, 7200)
                               .value_or(guests.runner_download_timeout.count()));
  if (config.network.empty()) {
    in.fail(nullptr, "guests need a network: set [libvirt] network");
  }
  in.reject_unknown_keys();
}

WarmConfig read_warm(const toml::table& table, const std::string& source, std::size_t index,
                     const ApiConfig& api) {
  TableReader in(table, source, "[[warm]] #" + std::to_string(index + 1));
  WarmConfig warm;
  warm.controller = read_owner_controller(in, api, "warm guests");
  warm.image = in.required_string("image");
  warm.flavor = in.required_string("flavor");
  warm.count = in.integer<std::size_t>("count", 0, 256).value_or(warm.count);
  warm.saved = in.integer<std::size_t>("saved", 0, 256).value_or(warm.saved);
  warm.ready_timeout = std::chrono::seconds(
      in.integer<long>("ready_timeout_seconds", 30, 86400).value_or(warm.ready_timeout.count()));
  warm.name = warm.image + "/" + warm.flavor + " for " + warm.controller;
  in.reject_unknown_keys();
  return warm;
}

void check_warm(TableReader& root, const AgentConfig& config) {
  for (const auto& warm : config.warm) {
    if (config.find_image(warm.image) == nullptr || config.find_flavor(warm.flavor) == nullptr) {
      root.fail(nullptr, "[[warm]] " + warm.name + ": image and flavor must be configured in " +
                             "[[images]] and [[flavors]]");
    }
    if (!config.guests.enabled) {
      root.fail(nullptr, "[[warm]] needs [guests]: warm guests wait for their assignment there");
    }
    if (const auto* image = config.find_image(warm.image);
        image != nullptr && image->os_type != wire::OsType::linux) {
      root.fail(nullptr, "[[warm]] " + warm.name + ": warm guests are Linux guests");
    }
  }
}

}  // namespace garm_edge::agent
