#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace garm_edge::wire {

/// What the holder of a certificate of the fleet CA is, written into the certificate as one URI
/// SAN (SPIFFE-like): a host runs an agent, a client calls agents and the hub (garm, a tenant,
/// an operator), the hub relays between them, a metrics reader (Prometheus) reads /metrics and
/// nothing else. Each side checks the role it expects before it sends or answers anything
/// (docs/fleet.md, "Roles").
enum class Role { host, client, hub, metrics };

/// "urn:garm-edge:agent:<name>" (hosts keep the prefix their certificates always carried).
inline constexpr std::string_view kHostUriPrefix = "urn:garm-edge:agent:";
inline constexpr std::string_view kClientUriPrefix = "urn:garm-edge:client:";
inline constexpr std::string_view kHubUriPrefix = "urn:garm-edge:hub:";
inline constexpr std::string_view kMetricsUriPrefix = "urn:garm-edge:metrics:";

std::string_view to_string(Role role);
std::string role_uri(Role role, std::string_view name);

struct RoleClaim {
  Role role;
  std::string name;
};

/// The role claims among a certificate's URI SANs (other URIs are not claims).
std::vector<RoleClaim> role_claims(const std::vector<std::string>& uri_names);

/// Why a peer with these URI SANs may not act as a client (a host's or the hub's certificate,
/// or one claiming two roles); nothing when it may. A certificate without a claim is a client
/// certificate made before roles existed (`pki init`, `issue-client`): the CA's operator made it.
std::optional<std::string> refusal_as_client(const std::vector<std::string>& uri_names);

/// The name of a metrics reader: a certificate that claims the metrics role and nothing else
/// (`garm-edge-hub issue-client NAME --role metrics`); nothing for any other.
std::optional<std::string> metrics_reader(const std::vector<std::string>& uri_names);

/// Why a peer may not act as the hub: only a certificate that claims the hub role, and nothing
/// else, may; or, from a hub made before roles existed, one that claims none with the CN only
/// `garm-edge-hub init` gives (no enrolment and no client certificate may take that name).
std::optional<std::string> refusal_as_hub(const std::vector<std::string>& uri_names,
                                          std::string_view common_name);

/// The CN of every hub's own server certificate.
inline constexpr std::string_view kHubCommonName = "garm-edge-hub";

/// Why a peer may not act as host `name` (an [[agents]] entry): a client's or the hub's
/// certificate never may (nor one with the hub's CN from before roles), a host's only under its
/// own name, and one without a claim only when `require_claim` is false (a certificate from
/// `pki init` on a single host).
std::optional<std::string> refusal_as_host(const std::vector<std::string>& uri_names,
                                           std::string_view common_name, std::string_view name,
                                           bool require_claim);

/// A request an agent's hub relayed carries, as its caller's identity, the URI below and the
/// controllers the hub lets that caller act for (the agent builds them from the tunnel's
/// request; no certificate of the CA carries them).
inline constexpr std::string_view kThroughHubControllersPrefix =
    "urn:garm-edge:through-hub:controllers:";

/// The controllers the hub vouched for (a comma-separated list, "*" for any) when the request
/// came through a hub that says; nothing otherwise.
std::optional<std::vector<std::string>> controllers_vouched_by_hub(
    const std::vector<std::string>& uri_names);

}  // namespace garm_edge::wire
