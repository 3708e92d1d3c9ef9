#pragma once

// What the PKI's parts share (net/pki*.cpp and net/certificate_writer.cpp only): mbedTLS errors
// as PkiError, the key type, DER pieces, and the certificate writer.

#include <array>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <mbedtls/ecp.h>
#include <mbedtls/pk.h>
#include <mbedtls/x509.h>

#include "net/drbg.hpp"
#include "net/pki.hpp"

namespace garm_edge::net::pki_detail {

inline constexpr int kCaValidityDays = 3650;
inline constexpr int kLeafValidityDays = 825;

/// Throws PkiError with `what` and mbedTLS's text for the code (check_pki: unless it is 0).
[[noreturn]] void fail_pki(const std::string& what, int mbedtls_code);

/// A certificate's or CRL's time (UTC) as Unix time.
std::int64_t unix_time_of(const mbedtls_x509_time& time);
void check_pki(int rc, const std::string& what);

/// DER tag-length-value; lengths up to 16 MiB (a CRL of many thousand serials).
std::string der(unsigned char tag, const std::string& value);

/// The subjectAltName extension's value (DER) for DNS names, IP addresses and URIs.
std::string subject_alt_names(const std::vector<std::string>& dns,
                              const std::vector<std::string>& ips,
                              const std::vector<std::string>& uris);

/// Names become a DN ("CN=<name>") and a file name: a plain token only, so no DN component
/// or path can be smuggled in.
void require_token(const std::string& name, const std::string& what);

/// The subject DN of the certificate file at `path`, as mbedTLS prints it.
std::string subject_of_certificate(const std::filesystem::path& path);

/// An mbedTLS key: a new P-256 one, or one read from a PEM file.
class Key {
 public:
  Key() { mbedtls_pk_init(&pk_); }
  ~Key() { mbedtls_pk_free(&pk_); }
  Key(const Key&) = delete;
  Key& operator=(const Key&) = delete;
  mbedtls_pk_context* get() { return &pk_; }

  static std::unique_ptr<Key> generate() {
    auto key = std::make_unique<Key>();
    check_pki(mbedtls_pk_setup(key->get(), mbedtls_pk_info_from_type(MBEDTLS_PK_ECKEY)),
              "key setup");
    check_pki(mbedtls_ecp_gen_key(MBEDTLS_ECP_DP_SECP256R1, mbedtls_pk_ec(*key->get()),
                                  mbedtls_ctr_drbg_random, &random_generator()),
              "generate a P-256 key");
    return key;
  }

  static std::unique_ptr<Key> load(const std::filesystem::path& path) {
    auto key = std::make_unique<Key>();
    check_pki(mbedtls_pk_parse_keyfile(key->get(), path.c_str(), nullptr), "read " + path.string());
    return key;
  }

  std::string pem() {
    std::array<unsigned char, 4096> buffer{};
    check_pki(mbedtls_pk_write_key_pem(&pk_, buffer.data(), buffer.size()), "encode a private key");
    return reinterpret_cast<const char*>(buffer.data());
  }

 private:
  mbedtls_pk_context pk_;
};

struct CertificateRequest {
  std::string subject;  // a DN such as "CN=garm"
  bool is_ca = false;
  std::vector<std::string> extended_key_usage;  // OIDs; none for a CA
  std::vector<std::string> dns_names;
  std::vector<std::string> ip_addresses;
  int validity_days = kLeafValidityDays;
  std::vector<std::string> uri_names = {};
};

/// A certificate for `subject_key` (the issuer's own key for a self-signed CA) as PEM, signed
/// by `issuer_key` with `issuer_name` (a DN) as its issuer: ECDSA with SHA-256.
std::string issue(const CertificateRequest& request, mbedtls_pk_context* subject_key,
                  Key& issuer_key, const std::string& issuer_name);

}  // namespace garm_edge::net::pki_detail
