#pragma once

// [api] and [[api.clients]] of agent.toml (read in api_config.cpp).

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "net/address_range.hpp"

namespace garm_edge::agent {

/// A client identity (a certificate's CN or URI SAN) and the garm controllers it may act for.
struct ApiClient {
  std::string identity;
  std::vector<std::string> controllers;  // UUIDs; "*" for any
};

/// The mutual-TLS control API (`serve`).
struct ApiConfig {
  bool enabled = false;  // an [api] section is present
  std::string address = "0.0.0.0";
  std::uint16_t port = 8443;
  std::filesystem::path ca;
  std::filesystem::path crl;
  std::filesystem::path certificate;
  std::filesystem::path key;
  std::size_t max_connections = 256;
  std::size_t workers = 8;  // threads that run commands (they block on libvirt)
  /// Only these peers are served; anyone else is closed at accept. Empty: any address.
  std::vector<net::AddressRange> allow;
  std::vector<ApiClient> clients;

  /// Is any of `identities` (CN and URI SANs of one certificate) in [[api.clients]]?
  bool knows(const std::vector<std::string>& identities) const;
  /// May `identities` (CN and URI SANs of one certificate) act for `controller_id`?
  bool allows(const std::vector<std::string>& identities, std::string_view controller_id) const;
  /// May `identities` act for every controller (`controllers = ["*"]`), as host-wide
  /// operations (draining) need?
  bool allows_every_controller(const std::vector<std::string>& identities) const;
  /// May any client act for `controller_id`?
  bool has_client_for(std::string_view controller_id) const;
  /// The one controller every client acts for; nothing when the clients name none, more than
  /// one, or any (`"*"`): then the agent serves more than one controller, or none it can name.
  std::optional<std::string> sole_controller() const;
};

}  // namespace garm_edge::agent
