#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <mbedtls/ssl.h>
#include <mbedtls/ssl_cache.h>
#include <mbedtls/x509_crl.h>
#include <mbedtls/x509_crt.h>

namespace garm_edge::net {

class TlsError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// "what: mbedTLS's description of `code`".
std::string describe_tls_error(const std::string& what, int code);

struct TlsFiles {
  std::filesystem::path ca;           // trust anchors for the peer
  std::filesystem::path crl;          // optional
  std::filesystem::path certificate;  // our own
  std::filesystem::path key;
  /// CRLs used when they exist (a hub's, fetched by the agent): a missing one is no error.
  std::vector<std::filesystem::path> crls_when_present = {};
};

/// Everything one TLS endpoint needs, loaded once and never changed afterwards: mbedTLS
/// requires a config to stay untouched while sessions use it, so a reload builds a new one
/// and sessions keep the old one alive through their shared_ptr. TLS 1.2 only, ECDHE with
/// AES-GCM or ChaCha20-Poly1305, renegotiation off, peer certificate required.
class TlsConfig {
 public:
  enum class Role { server, client };
  /// A server may serve clients without a certificate too (a hub's enrolment, where a new host
  /// has none yet): the handshake then succeeds, and the peer's identity stays empty unless a
  /// certificate was shown and verified.
  enum class ClientCertificates { required, optional };

  static std::shared_ptr<const TlsConfig> load(
      Role role, const TlsFiles& files,
      ClientCertificates client_certificates = ClientCertificates::required);
  /// A client that shows no certificate and checks none: only for fetching a CA certificate
  /// that is then checked against a fingerprint the operator gave (a join token's).
  static std::shared_ptr<const TlsConfig> client_unverified();
  /// A client that shows no certificate and trusts the CAs in `extra_ca_pem` (may be empty)
  /// plus, when that file exists, the system bundle: for garm's URLs, whose certificate may
  /// come from a public CA or from the operator's own. Throws TlsError when `extra_ca_pem` is
  /// not empty and not entirely valid PEM certificates, or when no CA is left to trust.
  static std::shared_ptr<const TlsConfig> client_trusting(
      std::string_view extra_ca_pem,
      const std::filesystem::path& system_bundle = "/etc/ssl/certs/ca-certificates.crt");
  ~TlsConfig();
  TlsConfig(const TlsConfig&) = delete;
  TlsConfig& operator=(const TlsConfig&) = delete;

  const mbedtls_ssl_config* ssl_config() const { return &config_; }
  /// Would `peer` pass this config's CA and CRL? For connections verified under an older config.
  bool accepts(const mbedtls_x509_crt* peer) const;
  /// For a certificate verified in full under these same CAs before (a resumed session's; the
  /// caller makes sure by ca_tag()): what can have changed since, without a signature check:
  /// it is within its dates, its issuer is among the CAs (by name) and within its dates, and
  /// no CRL of that issuer names its serial (a CRL out of its dates refuses it, as a full
  /// verification would).
  bool still_accepts(const mbedtls_x509_crt* peer) const;
  /// The SHA-256 of the CA certificates this config trusts (hex): a session verified under
  /// other CAs is not resumed.
  const std::string& ca_tag() const { return ca_tag_; }
  /// 16 hex digits of the SHA-256 of the certificate this side shows ("none" without one): a
  /// client's saved session belongs to the identity that made it.
  const std::string& own_tag() const { return own_tag_; }

 private:
  TlsConfig();
  /// The settings every config shares: protocol version, suites, curves, renegotiation.
  void apply_common_settings(Role role);

  mutable mbedtls_ssl_config config_;
  mbedtls_x509_crt ca_;
  mbedtls_x509_crl crl_;
  mbedtls_x509_crt own_;
  mbedtls_pk_context key_;
  /// Server side: resumption by session ID. A reload makes a new, empty cache, so a client
  /// whose certificate was since revoked cannot resume; no session tickets are issued.
  mutable mbedtls_ssl_cache_context cache_;
  std::string own_tag_ = "none";
  std::string ca_tag_;
};

/// TlsConfig::client_trusting per distinct CA bundle, made once: loading the system bundle
/// costs milliseconds, and every guest of one garm shows the same bundle. Each holds a parsed
/// system store (about 350 KB), so only the `capacity` most recently used are kept: bundles
/// chosen by many controllers (or one controller that varies its bundle) cannot grow the agent
/// without bound. A config in use stays alive with its connections either way.
class ClientTrustCache {
 public:
  explicit ClientTrustCache(std::size_t capacity = 8) : capacity_(capacity) {}
  /// Throws TlsError as client_trusting does (and remembers nothing then).
  std::shared_ptr<const TlsConfig> trusting(const std::string& extra_ca_pem);
  std::size_t size() const;

 private:
  struct Cached {
    std::shared_ptr<const TlsConfig> config;
    std::uint64_t last_used = 0;
  };
  void make_room();

  std::size_t capacity_;
  mutable std::mutex mutex_;
  std::map<std::string, Cached> configs_;  // by the bundle's hash
  std::uint64_t uses_ = 0;
};

}  // namespace garm_edge::net
