#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>

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
};

/// Everything one TLS endpoint needs, loaded once and never changed afterwards: mbedTLS
/// requires a config to stay untouched while sessions use it, so a reload builds a new one
/// and sessions keep the old one alive through their shared_ptr. TLS 1.2 only, ECDHE with
/// AES-GCM or ChaCha20-Poly1305, renegotiation off, peer certificate required.
class TlsConfig {
 public:
  enum class Role { server, client };

  static std::shared_ptr<const TlsConfig> load(Role role, const TlsFiles& files);
  ~TlsConfig();
  TlsConfig(const TlsConfig&) = delete;
  TlsConfig& operator=(const TlsConfig&) = delete;

  const mbedtls_ssl_config* ssl_config() const { return &config_; }
  /// Would `peer` pass this config's CA and CRL? For connections verified under an older config.
  bool accepts(const mbedtls_x509_crt* peer) const;

 private:
  TlsConfig();

  mutable mbedtls_ssl_config config_;
  mbedtls_x509_crt ca_;
  mbedtls_x509_crl crl_;
  mbedtls_x509_crt own_;
  mbedtls_pk_context key_;
  /// Server side: resumption by session ID. A reload makes a new, empty cache, so a client
  /// whose certificate was since revoked cannot resume; no session tickets are issued.
  mutable mbedtls_ssl_cache_context cache_;
};

}  // namespace garm_edge::net
