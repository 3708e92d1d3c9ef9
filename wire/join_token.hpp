#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "wire/identity.hpp"

namespace garm_edge::wire {

/// What `garm-edge-agent join` needs to enrol a host at a hub, printed by `garm-edge-hub token
/// create` as one word: where the hub is, which CA it must show (so the first connection
/// trusts nothing else), and the token's ID and secret.
struct JoinToken {
  std::string hub_url;         // https://host[:port], the hub's agent listener
  std::string ca_fingerprint;  // lower-case hex SHA-256 of the CA certificate's DER
  std::string id;              // 16 lower-case hex digits: names the token, is logged
  std::string secret;          // never logged; the hub keeps only its SHA-256

  std::string encode() const;
  /// Nothing when `text` is not a token this version makes (the reason is not given: a
  /// malformed token is only ever a typo or a truncation).
  static std::optional<JoinToken> decode(std::string_view text);
};

inline constexpr std::string_view kJoinTokenPrefix = "gejoin1.";

/// The URI SAN prefix of every host certificate a hub issues ("urn:garm-edge:agent:<name>"):
/// a hub's tunnel listener serves only such certificates (wire/identity.hpp has every role).
inline constexpr std::string_view kAgentUriPrefix = kHostUriPrefix;

/// Is `text` 16 lower-case hex digits (a token ID)?
bool is_token_id(std::string_view text);

}  // namespace garm_edge::wire
