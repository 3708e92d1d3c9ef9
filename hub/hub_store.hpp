#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/unique_fd.hpp"
#include "hub/host_names.hpp"
#include "net/pki.hpp"
#include "wire/identity.hpp"
#include "wire/join_token.hpp"
#include "wire/validate.hpp"

namespace garm_edge::hub {

class HubState;
class StateReader;
class StateChange;

/// An enrolment or renewal the hub refused; the message says why and is safe to show the
/// host that asked (it never repeats a secret).
class Refused : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

using UnixSeconds = std::int64_t;

struct TokenRecord {
  std::string id;
  std::string secret_sha256;
  UnixSeconds created_at = 0;
  UnixSeconds expires_at = 0;
  unsigned uses_left = 1;
  std::vector<std::string> labels;  // given to every agent enrolled with it
  HostNames host = {};
};

struct IssuedCertificate {
  std::string serial;          // hex
  UnixSeconds not_before = 0;  // 0: recorded by a hub that did not keep it
  UnixSeconds not_after = 0;
};

struct AgentRecord {
  std::string name;
  std::vector<std::string> labels;
  UnixSeconds enrolled_at = 0;
  std::string token_id;  // the token it enrolled with
  /// Certificates the hub accepts from it: the newest and, after a renewal, the one the renewal
  /// was asked with until it expires (the agent may still be using it on live connections).
  std::vector<IssuedCertificate> certificates;
  std::vector<std::string> dns_names;
  std::vector<std::string> ip_addresses;
  UnixSeconds renewed_at = 0;  // 0: never

  bool accepts(const std::string& serial, UnixSeconds now) const;
};

/// The URI SAN every agent certificate the hub issues carries: the hub's tunnel listener serves
/// only such certificates, and its provider listener never does (an agent is no client).
std::string agent_uri(const std::string& name);
using wire::kAgentUriPrefix;

/// A client certificate the CA issued (issue-client), kept with the records: every hub of one
/// database reserves its name, and any of them can revoke it.
struct ClientRecord {
  std::string name;
  std::string role;    // "client" or "metrics"
  std::string serial;  // hex
  UnixSeconds not_after = 0;
  UnixSeconds issued_at = 0;
};

/// What a joiner asks for; the token decides what it gets (HostNames).
struct EnrolmentRequest {
  std::string token_id;
  std::string secret;
  std::string name;  // the agent's name (its agent_id); may be empty when the token fixes it
  std::string request_pem;
  std::vector<std::string> dns_names;  // must be among the token's
  std::vector<std::string> ip_addresses;
};

/// A certificate the CA revoked, kept (and named in the CRL) until it expires.
struct RevokedRecord {
  std::string serial;
  std::string holder;  // "host NAME" or "client NAME"
  UnixSeconds not_after = 0;
  UnixSeconds revoked_at = 0;
};

/// How the hub issues and renews host certificates (hub.toml's [certificates]).
struct CertificatePolicy {
  int host_days = 30;
  /// A renewal is refused while more than this part of the certificate's life is left.
  double renewal_window = 1.0 / 3.0;
  /// Per host: a stolen key cannot mint certificates at speed, nor load the hub.
  std::chrono::seconds min_renewal_interval{std::chrono::minutes(10)};
  /// The CRL's nextUpdate; the hub writes a fresh one every day and on every revocation.
  int crl_days = 90;
};

struct Enrolled {
  AgentRecord agent;
  std::string certificate_pem;
  std::string ca_pem;
};

/// The hub's state: its PKI as files under one directory, its records (HubState) there too or in
/// PostgreSQL, so that a restart loses nothing and the operator's commands (`token create`,
/// `remove`) work beside the running daemon:
///   pki/ca.crt, pki/ca.key       the fleet's CA (pki init), also for agents reached directly
///   pki/hub.crt, pki/hub.key     the hub's own server certificate
///   pki/clients/<name>.crt/.key  client certificates for garm-provider-edge
///   pki/crl.pem                  the CRL of revoked certificates, signed by the CA (0644:
///                                garm's host reads it)
/// and the records: join tokens (secrets as SHA-256 only), enrolled agents and the serials of
/// their certificates, certificates revoked and not yet expired (hub_state.hpp).
class HubStore {
 public:
  /// The records as files in `directory`.
  explicit HubStore(std::filesystem::path directory, CertificatePolicy policy = {});
  /// The records in `state`.
  HubStore(std::filesystem::path directory, CertificatePolicy policy,
           std::unique_ptr<HubState> state);
  ~HubStore();
  HubStore(HubStore&&) noexcept;
  HubStore& operator=(HubStore&&) noexcept;

  /// Names no host may take, besides the client certificates under pki/clients and the hub's own
  /// CN: the identities of the hub's [[clients]] (a host named as a client would be that client
  /// wherever certificates are checked by CN).
  void reserve_client_names(std::vector<std::string> identities);

  struct InitOptions {
    std::vector<std::string> dns_names;  // how agents and providers reach the hub
    std::vector<std::string> ip_addresses;
    std::string client_name = "garm";
  };
  /// A new CA, the hub's certificate and a first client certificate. Refuses to replace a CA.
  static void init(const std::filesystem::path& directory, const InitOptions& options);

  /// A new token; returns it with its secret (shown once, never stored). Throws Refused for
  /// names a host may not take (a client's, an enrolled host's, DNS names without a fixed name).
  std::pair<TokenRecord, std::string> create_token(std::chrono::seconds lifetime, unsigned uses,
                                                   std::vector<std::string> labels, HostNames host,
                                                   UnixSeconds now);
  std::vector<TokenRecord> tokens() const;
  HubState& state() const { return *state_; }
  bool revoke_token(const std::string& id);

  /// Checks the token (known, not expired, not used up, the secret) and the names it grants,
  /// takes one use and signs the request for the token's names only. Throws Refused with the
  /// reason; nothing is issued or used up then.
  Enrolled enrol(const EnrolmentRequest& request, UnixSeconds now);
  /// A new certificate for an enrolled agent that showed one of its certificates (`serial`),
  /// once less than the policy's window of its life is left and no sooner than the minimum
  /// interval after the last renewal. The hub then accepts the new certificate and the one
  /// shown; any other is revoked.
  Enrolled renew(const std::string& name, const std::string& serial, const std::string& request_pem,
                 UnixSeconds now);
  /// Forgets the agent and revokes its certificates. False if unknown.
  bool remove(const std::string& name, UnixSeconds now);

  /// A client certificate (pki/clients/NAME.crt, .key) with the client role, for a name no host
  /// has or may be given by a token.
  /// `role`: client, or metrics for a certificate that reads /metrics only (Prometheus's).
  net::IssuedFiles issue_client(const std::string& name, wire::Role role = wire::Role::client);
  /// Revokes the client certificate pki/clients/NAME.crt and removes its files. False if none.
  bool revoke_client(const std::string& name, UnixSeconds now);
  std::vector<RevokedRecord> revoked() const;
  /// The CRL as last written.
  std::string crl_pem() const;
  std::filesystem::path crl_path() const { return pki() / "crl.pem"; }

  /// Run by the daemon when it starts: gives a hub certificate made before roles existed the
  /// hub's role (and localhost, for a provider beside it), and writes the CRL when it is missing
  /// or older than a day. Idempotent.
  void prepare_to_serve(UnixSeconds now);
  /// Writes a fresh CRL when the last is older than a day (its nextUpdate stays far ahead).
  void refresh_crl(UnixSeconds now);
  /// Copies the CRL the state keeps (PostgreSQL: made by any hub) to pki/crl.pem when it is
  /// newer than the one this store wrote last. True when it wrote one.
  bool sync_crl();

  std::vector<AgentRecord> agents() const;
  std::optional<AgentRecord> agent(const std::string& name) const;
  /// Changes with every enrolment, renewal and removal, also by another process: the daemon
  /// rereads the agents when it changes.
  std::uint64_t agents_generation() const;

  std::filesystem::path pki() const { return directory_ / "pki"; }
  std::string ca_pem() const;
  std::string ca_fingerprint() const;
  const std::filesystem::path& directory() const { return directory_; }

  const CertificatePolicy& policy() const { return policy_; }

 private:
  Enrolled sign(AgentRecord agent, const std::string& request_pem) const;
  /// Why `name` may not be a host's (a client's name, the hub's); nothing when it may.
  std::optional<std::string> reserved(const std::string& name, StateReader& records) const;
  /// The host `request` becomes under `token`, or Refused saying why not.
  AgentRecord grant(const TokenRecord& token, const EnrolmentRequest& request, UnixSeconds now,
                    StateReader& records) const;
  /// Adds to the revocations (dropping what expired) and writes a new CRL, within `change`.
  void revoke(const std::vector<RevokedRecord>& records, UnixSeconds now,
              StateChange& change) const;
  std::string make_crl(const std::vector<RevokedRecord>& records, std::uint64_t number) const;

  std::filesystem::path directory_;
  CertificatePolicy policy_;
  std::vector<std::string> reserved_names_;
  std::unique_ptr<HubState> state_;
  /// The number of the CRL written to pki/crl.pem last, by a change or a copy: a copy read
  /// before a change committed never replaces that change's CRL.
  struct CrlWritten {
    std::mutex mutex;
    std::uint64_t number = 0;
  };
  std::unique_ptr<CrlWritten> crl_written_ = std::make_unique<CrlWritten>();
};

using wire::is_agent_name;

}  // namespace garm_edge::hub
