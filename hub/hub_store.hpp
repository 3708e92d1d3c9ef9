#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/unique_fd.hpp"
#include "wire/join_token.hpp"
#include "wire/validate.hpp"

namespace garm_edge::hub {

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
};

struct IssuedCertificate {
  std::string serial;  // hex
  UnixSeconds not_after = 0;
};

struct AgentRecord {
  std::string name;
  std::vector<std::string> labels;
  UnixSeconds enrolled_at = 0;
  std::string token_id;  // the token it enrolled with
  /// Certificates the hub accepts from it: the newest and, after a renewal, the one before it
  /// until it expires (the agent may still be using it on live connections).
  std::vector<IssuedCertificate> certificates;
  std::vector<std::string> dns_names;
  std::vector<std::string> ip_addresses;

  bool accepts(const std::string& serial, UnixSeconds now) const;
};

/// The URI SAN every agent certificate the hub issues carries: the hub's tunnel listener serves
/// only such certificates, and its provider listener never does (an agent is no client).
std::string agent_uri(const std::string& name);
using wire::kAgentUriPrefix;

struct EnrolmentRequest {
  std::string token_id;
  std::string secret;
  std::string name;  // the agent's name (its agent_id)
  std::string request_pem;
  std::vector<std::string> dns_names;  // for an agent also reached directly
  std::vector<std::string> ip_addresses;
};

struct Enrolled {
  AgentRecord agent;
  std::string certificate_pem;
  std::string ca_pem;
};

/// The hub's state in files under one directory, so that a restart loses nothing and the
/// operator's commands (`token create`, `remove`) work beside the running daemon:
///   pki/ca.crt, pki/ca.key       the fleet's CA (pki init), also for agents reached directly
///   pki/hub.crt, pki/hub.key     the hub's own server certificate
///   pki/clients/<name>.crt/.key  client certificates for garm-provider-edge
///   tokens/<id>.json             join tokens (secrets as SHA-256 only)
///   agents/<name>.json           enrolled agents and the serials of their certificates
/// Every change takes an exclusive flock on `lock` and writes atomically.
class HubStore {
 public:
  explicit HubStore(std::filesystem::path directory);

  struct InitOptions {
    std::vector<std::string> dns_names;  // how agents and providers reach the hub
    std::vector<std::string> ip_addresses;
    std::string client_name = "garm";
  };
  /// A new CA, the hub's certificate and a first client certificate. Refuses to replace a CA.
  static void init(const std::filesystem::path& directory, const InitOptions& options);

  /// A new token; returns it with its secret (shown once, never stored).
  std::pair<TokenRecord, std::string> create_token(std::chrono::seconds lifetime, unsigned uses,
                                                   std::vector<std::string> labels,
                                                   UnixSeconds now);
  std::vector<TokenRecord> tokens() const;
  bool revoke_token(const std::string& id);

  /// Checks the token (known, not expired, not used up, the secret), takes one use and signs
  /// the request. Throws Refused with the reason; nothing is issued or used up then.
  Enrolled enrol(const EnrolmentRequest& request, UnixSeconds now);
  /// A new certificate for an enrolled agent that showed its current one (`serial`). The old
  /// one stays accepted until it expires.
  Enrolled renew(const std::string& name, const std::string& serial, const std::string& request_pem,
                 UnixSeconds now);
  /// Forgets the agent: none of its certificates is accepted from now on. False if unknown.
  bool remove(const std::string& name);

  std::vector<AgentRecord> agents() const;
  std::optional<AgentRecord> agent(const std::string& name) const;
  /// Changes with every enrolment, renewal and removal, also by another process: the daemon
  /// rereads the agents when it changes.
  std::uint64_t agents_generation() const;

  std::filesystem::path pki() const { return directory_ / "pki"; }
  std::string ca_pem() const;
  std::string ca_fingerprint() const;
  const std::filesystem::path& directory() const { return directory_; }

  static constexpr int kAgentCertificateDays = 30;

 private:
  /// The exclusive lock every change holds.
  UniqueFd lock() const;
  void write_agent(const AgentRecord& agent) const;
  Enrolled sign(AgentRecord agent, const std::string& request_pem) const;

  std::filesystem::path directory_;
};

using wire::is_agent_name;

}  // namespace garm_edge::hub
