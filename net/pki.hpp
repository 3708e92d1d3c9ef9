#pragma once

#include <cstdint>
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
  /// The server certificate's files (<stem>.crt, <stem>.key) and CN: an agent's, or a hub's.
  std::string server_file_stem = "agent";
  std::string server_common_name = "garm-edge-agent";
  /// The role URIs (wire/identity.hpp) of the server certificate (the hub's; none for a single
  /// host) and of the first client's.
  std::vector<std::string> server_uri_names = {};
  std::vector<std::string> client_uri_names = {};
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

/// A client certificate signed by the CA in `directory`: clients/<name>.crt and .key, carrying
/// `uri_names` (the client role's URI, wire/identity.hpp).
IssuedFiles pki_issue_client(const std::filesystem::path& directory, const std::string& name,
                             const std::vector<std::string>& uri_names = {});

/// A new key and server certificate (EKU serverAuth, 825 days) signed by the CA in `directory`,
/// replacing <stem>.crt and <stem>.key (the key is renamed into place first: a crash between
/// the two leaves a pair that fails to load, never a certificate for a key that is gone).
void pki_reissue_server(const std::filesystem::path& directory, const std::string& stem,
                        const std::string& common_name, const std::vector<std::string>& dns_names,
                        const std::vector<std::string>& ip_addresses,
                        const std::vector<std::string>& uri_names);

/// One certificate a CRL names.
struct RevokedCertificate {
  std::string serial;            // hex, as CertificateFacts gives it
  std::int64_t revoked_at_unix;  // when it was revoked
};

/// A CRL (RFC 5280, v2, with a CRL number) signed by the CA in `ca_directory`, as PEM: valid
/// from an hour ago (clocks of other hosts may be behind) for `validity_days`. mbedTLS and
/// OpenSSL read it; mbedTLS 2.28 has no CRL writer, so it is written here.
std::string pki_make_crl(const std::filesystem::path& ca_directory,
                         const std::vector<RevokedCertificate>& revoked, std::uint64_t number,
                         int validity_days);

/// A new P-256 key and a certificate request for it (CN=<common_name>), both PEM: the key
/// never leaves the host that made it.
struct KeyAndRequest {
  std::string key_pem;
  std::string request_pem;
};
KeyAndRequest pki_make_request(const std::string& common_name);

/// What a certificate signed from a request says; the request contributes only its key.
struct LeafProfile {
  std::string common_name;
  std::vector<std::string> dns_names = {};
  std::vector<std::string> ip_addresses = {};
  std::vector<std::string> uri_names = {};
  bool server_auth = false;
  bool client_auth = false;
  int validity_days = 90;
};

/// Signs `request_pem` with the CA in `ca_directory`, after checking that the request's key
/// signed it and is P-256. Returns the certificate's PEM. Throws PkiError.
std::string pki_sign_request(const std::filesystem::path& ca_directory,
                             const std::string& request_pem, const LeafProfile& profile);

/// Throws PkiError unless `crl_pem` is a CRL the CA certificate in `ca_file` signed: a CRL from
/// anyone else would make every peer of that CA fail verification (mbedTLS flags it untrusted).
/// Returns when it was issued (its thisUpdate, Unix time).
std::int64_t pki_check_crl(const std::filesystem::path& ca_file, const std::string& crl_pem);

struct CertificateFacts {
  std::string common_name;
  std::string serial;              // hex
  std::string fingerprint_sha256;  // hex, of the DER
  std::int64_t not_before_unix = 0;
  std::int64_t not_after_unix = 0;
  std::vector<std::string> dns_names = {};
  std::vector<std::string> ip_addresses = {};  // as text
  std::vector<std::string> uri_names = {};
};
/// The first certificate of `pem`. Throws PkiError.
CertificateFacts certificate_facts(const std::string& pem);

}  // namespace garm_edge::net
