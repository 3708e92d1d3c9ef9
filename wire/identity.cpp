#include "wire/identity.hpp"

#include <algorithm>
#include <array>
#include <utility>

#include "common/text.hpp"

namespace garm_edge::wire {
namespace {

constexpr std::array<std::pair<Role, std::string_view>, 4> kPrefixes{{
    {Role::host, kHostUriPrefix},
    {Role::client, kClientUriPrefix},
    {Role::hub, kHubUriPrefix},
    {Role::metrics, kMetricsUriPrefix},
}};

/// The name comes from the peer's certificate: printable, bounded, before it reaches a message
/// (garm's log, an answer).
std::string describe(const RoleClaim& claim) {
  return std::string(to_string(claim.role)) + " \"" + printable_excerpt(claim.name, 128) + "\"";
}

}  // namespace

std::string_view to_string(Role role) {
  switch (role) {
    case Role::host:
      return "host";
    case Role::client:
      return "client";
    case Role::hub:
      return "hub";
    case Role::metrics:
      return "metrics reader";
  }
  return "unknown";
}

std::string role_uri(Role role, std::string_view name) {
  for (const auto& [candidate, prefix] : kPrefixes) {
    if (candidate == role) {
      return std::string(prefix) + std::string(name);
    }
  }
  return {};
}

std::vector<RoleClaim> role_claims(const std::vector<std::string>& uri_names) {
  std::vector<RoleClaim> claims;
  for (const auto& uri : uri_names) {
    for (const auto& [role, prefix] : kPrefixes) {
      if (uri.starts_with(prefix)) {
        claims.push_back({.role = role, .name = uri.substr(prefix.size())});
      }
    }
  }
  return claims;
}

std::optional<std::string> refusal_as_client(const std::vector<std::string>& uri_names) {
  const auto claims = role_claims(uri_names);
  if (claims.size() > 1) {
    return "a certificate that claims more than one role";
  }
  if (!claims.empty() && claims.front().role != Role::client) {
    return "the certificate of " + describe(claims.front()) + ", which is no client";
  }
  return std::nullopt;
}

std::optional<std::string> metrics_reader(const std::vector<std::string>& uri_names) {
  const auto claims = role_claims(uri_names);
  if (claims.size() != 1 || claims.front().role != Role::metrics || claims.front().name.empty()) {
    return std::nullopt;
  }
  return claims.front().name;
}

std::optional<std::string> refusal_as_hub(const std::vector<std::string>& uri_names,
                                          std::string_view common_name) {
  const auto claims = role_claims(uri_names);
  if (claims.size() == 1 && claims.front().role == Role::hub) {
    return std::nullopt;
  }
  if (claims.empty() && common_name == kHubCommonName) {
    return std::nullopt;
  }
  if (claims.empty()) {
    return "a certificate that claims no role, not the hub's";
  }
  if (claims.size() > 1) {
    return "a certificate that claims more than one role";
  }
  return "the certificate of " + describe(claims.front()) + ", not the hub's";
}

std::optional<std::string> refusal_as_host(const std::vector<std::string>& uri_names,
                                           std::string_view common_name, std::string_view name,
                                           bool require_claim) {
  const auto claims = role_claims(uri_names);
  if (claims.size() > 1) {
    return "a certificate that claims more than one role";
  }
  if (claims.empty() && common_name == kHubCommonName) {
    return "the hub's certificate, which is no host";
  }
  if (claims.empty()) {
    return require_claim ? std::optional<std::string>(
                               "a certificate that names no host, where "
                               "host \"" +
                               std::string(name) + "\" is required")
                         : std::nullopt;
  }
  const auto& claim = claims.front();
  if (claim.role != Role::host) {
    return "the certificate of " + describe(claim) + ", which is no host";
  }
  if (claim.name != name) {
    return "the certificate of " + describe(claim) + ", not of host \"" + std::string(name) + "\"";
  }
  return std::nullopt;
}

std::optional<std::vector<std::string>> controllers_vouched_by_hub(
    const std::vector<std::string>& uri_names) {
  for (const auto& uri : uri_names) {
    if (!uri.starts_with(kThroughHubControllersPrefix)) {
      continue;
    }
    std::vector<std::string> controllers;
    const auto list = std::string_view(uri).substr(kThroughHubControllersPrefix.size());
    for (std::size_t at = 0; at < list.size();) {
      const auto comma = std::min(list.find(',', at), list.size());
      controllers.emplace_back(list.substr(at, comma - at));
      at = comma + 1;
    }
    return controllers;
  }
  return std::nullopt;
}

}  // namespace garm_edge::wire
