#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "net/https_client.hpp"
#include "net/tls_config.hpp"

namespace garm_edge::agent {

/// An agent's enrolment at a hub, in `<state_dir>/hub/`: hub.json (where the hub is, the
/// agent's name there, its labels), ca.crt (the fleet CA, pinned at join) and agent.pem (0600:
/// its certificate and then its key, made on this host and never sent anywhere).
struct HubEnrolment {
  std::filesystem::path directory;
  std::string hub_url;
  std::string name;
  std::vector<std::string> labels;

  std::filesystem::path ca() const { return directory / "ca.crt"; }
  std::filesystem::path certificate() const { return directory / "agent.pem"; }
  std::filesystem::path key() const { return directory / "agent.pem"; }
  /// The hub's CRL as last fetched (the agent's API refuses what it names).
  std::filesystem::path crl() const { return directory / "crl.pem"; }
  /// The fleet's hubs as a hub last listed them (GET /v1/hubs); apart from hub.json, whose
  /// change means a new enrolment.
  std::filesystem::path hubs_file() const { return directory / "hubs.json"; }
  /// Every hub to keep tunnels to and to ask: the one joined, then the others as last listed.
  std::vector<std::string> hub_urls() const;
  /// The agent's client TLS config for the hub (its CA, certificate and key, and the hub's CRL
  /// as last fetched unless `with_crl` is false).
  std::shared_ptr<const net::TlsConfig> client_tls(bool with_crl = true) const;
  /// Seconds until the agent's certificate expires, and its whole lifetime.
  struct Validity {
    std::int64_t remaining = 0;
    std::int64_t lifetime = 0;
  };
  Validity validity(std::int64_t now_unix) const;
};

/// What every connection to the hub checks of its certificate before it sends anything: the
/// hub's role (another host of the same CA posing as the hub is refused). A certificate without
/// any role (a hub made before roles) passes only until the hub has shown one with its role:
/// that is remembered in `enrolment_directory`, and the old certificate is revoked by then.
net::PeerCheck hub_peer(std::filesystem::path enrolment_directory);

/// Where the enrolment of an agent with `state_dir` lives, and its copy of the hub's CRL.
std::filesystem::path hub_directory(const std::filesystem::path& state_dir);
std::filesystem::path hub_crl_path(const std::filesystem::path& state_dir);

/// The enrolment in `state_dir`, if the host joined a hub. Throws when it exists but is broken.
std::optional<HubEnrolment> load_hub_enrolment(const std::filesystem::path& state_dir);

struct JoinOptions {
  std::string token;  // as `garm-edge-hub token create` printed it
  std::filesystem::path state_dir;
  std::string name;                         // the agent's ID
  std::vector<std::string> dns_names = {};  // when garm also reaches this agent directly
  std::vector<std::string> ip_addresses = {};
  std::chrono::milliseconds timeout{std::chrono::seconds(30)};
};

class JoinError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// `garm-edge-agent join`: fetches the hub's CA and checks it against the token's fingerprint,
/// makes a key and a certificate request here, sends the request with the token over TLS that
/// trusts only that CA, and writes the enrolment. Refuses to replace an enrolment. Throws
/// JoinError saying which step failed (never quoting the token's secret).
HubEnrolment join_hub(const JoinOptions& options);

/// At most this many hubs are kept from a hub's list: each one costs a thread and tunnels.
inline constexpr std::size_t kMaxHubs = 16;

/// A hub's list of the fleet's hubs (`{"hubs": ["https://...", ...]}`): https URLs only, at
/// most kMaxHubs of them, in the hub's order; nothing when it is no such list.
std::optional<std::vector<std::string>> parse_hub_urls(const std::string& body);

/// Keeps `urls` as the enrolment's hubs (hubs.json).
void save_hub_urls(const HubEnrolment& enrolment, const std::vector<std::string>& urls);

/// The order the fleet's hubs are asked in: those of `reachable_first` (hubs the agent holds
/// tunnels to now) that are in `fleet`, then the rest of `fleet` as it stands.
std::vector<std::string> hubs_in_asking_order(const std::vector<std::string>& fleet,
                                              const std::vector<std::string>& reachable_first);

/// The calls below ask the enrolment's hubs until one answers, those in `reachable_first` first.

/// The fleet's hubs, asked of any of them; nothing from a hub older than the list. Throws
/// JoinError.
std::optional<std::vector<std::string>> fetch_hub_urls(
    const HubEnrolment& enrolment, std::chrono::milliseconds timeout,
    const std::vector<std::string>& reachable_first = {});

/// The hub's CRL, checked to be signed by the enrolment's CA; nothing from a hub that has none
/// (older than revocation). Throws JoinError.
std::optional<std::string> fetch_hub_crl(const HubEnrolment& enrolment,
                                         std::chrono::milliseconds timeout,
                                         const std::vector<std::string>& reachable_first = {});

/// A new key and certificate for an enrolled agent, asked of the hub with the current
/// certificate; agent.pem is replaced in one rename. Throws JoinError.
void renew_certificate(const HubEnrolment& enrolment, std::chrono::milliseconds timeout,
                       const std::vector<std::string>& reachable_first = {});

}  // namespace garm_edge::agent
