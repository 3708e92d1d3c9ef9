#pragma once

#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

namespace garm_edge::net {

class PkiError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct PkiInitOptions {
  std::filesystem::path directory;
  /// DNS names and addresses clients use to reach the agent: the provider checks a URL's host
  /// name against the DNS SANs and its address (IPv4 or IPv6) against the IP SANs.
  std::vector<std::string> agent_dns_names;
  std::vector<std::string> agent_ip_addresses;
  /// The first client certificate, for garm (its CN is the identity the agent authorizes).
  std::string client_name = "garm";
};

struct IssuedFiles {
  std::filesystem::path certificate;
  std::filesystem::path key;
};

/// A new CA (ca.crt, ca.key), the agent's server certificate (agent.crt, agent.key; EKU
/// serverAuth, SANs as given) and a first client certificate (clients/<name>.crt/.key; EKU
/// clientAuth), all ECDSA P-256 with SHA-256, written with mbedTLS's X.509 writer. Keys are
/// 0600. Refuses to overwrite an existing CA.
void pki_init(const PkiInitOptions& options);

/// A client certificate signed by the CA in `directory`: clients/<name>.crt and .key.
IssuedFiles pki_issue_client(const std::filesystem::path& directory, const std::string& name);

}  // namespace garm_edge::net
