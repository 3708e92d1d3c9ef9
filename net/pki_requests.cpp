#include <arpa/inet.h>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <mbedtls/ecp.h>
#include <mbedtls/error.h>
#include <mbedtls/oid.h>
#include <mbedtls/pem.h>
#include <mbedtls/pk.h>
#include <mbedtls/sha256.h>
#include <mbedtls/x509_crl.h>
#include <mbedtls/x509_crt.h>
#include <mbedtls/x509_csr.h>

#include "common/hex.hpp"
#include "net/certificate_writer.hpp"
#include "net/drbg.hpp"
#include "net/pki.hpp"

// Certificate requests: made where the key stays, checked and signed by the CA, and what a
// signed certificate says.
namespace garm_edge::net {
namespace {

namespace fs = std::filesystem;
using namespace pki_detail;  // NOLINT(google-build-using-namespace): the PKI's own parts

/// A parsed CSR whose signature was checked: mbedTLS 2.28 parses a CSR without checking that
/// its key signed it, and a request anyone could have made for someone else's key proves
/// nothing.
class VerifiedRequest {
 public:
  explicit VerifiedRequest(const std::string& pem) {
    mbedtls_x509_csr_init(&csr_);
    if (pem.size() > 16 * 1024) {
      throw PkiError("the certificate request is too large");
    }
    const int rc = mbedtls_x509_csr_parse(
        &csr_, reinterpret_cast<const unsigned char*>(pem.c_str()), pem.size() + 1);
    if (rc != 0) {
      mbedtls_x509_csr_free(&csr_);
      fail_pki("the certificate request does not parse", rc);
    }
    try {
      verify();
    } catch (...) {
      mbedtls_x509_csr_free(&csr_);
      throw;
    }
  }
  ~VerifiedRequest() { mbedtls_x509_csr_free(&csr_); }
  VerifiedRequest(const VerifiedRequest&) = delete;
  VerifiedRequest& operator=(const VerifiedRequest&) = delete;
  mbedtls_pk_context* key() { return &csr_.pk; }

 private:
  void verify() {
    if (mbedtls_pk_get_type(&csr_.pk) != MBEDTLS_PK_ECKEY ||
        mbedtls_pk_ec(csr_.pk)->grp.id != MBEDTLS_ECP_DP_SECP256R1) {
      throw PkiError("the certificate request's key must be ECDSA P-256");
    }
    const auto* md = mbedtls_md_info_from_type(csr_.sig_md);
    std::array<unsigned char, MBEDTLS_MD_MAX_SIZE> hash{};
    if (md == nullptr || mbedtls_md(md, csr_.cri.p, csr_.cri.len, hash.data()) != 0 ||
        mbedtls_pk_verify(&csr_.pk, csr_.sig_md, hash.data(), mbedtls_md_get_size(md), csr_.sig.p,
                          csr_.sig.len) != 0) {
      throw PkiError("the certificate request's signature does not verify");
    }
  }

  mbedtls_x509_csr csr_;
};

/// The DNS names, addresses and URIs of a certificate's subjectAltName (others are skipped).
void read_alt_names(const mbedtls_x509_sequence& names, CertificateFacts& facts) {
  constexpr int kDns = 2;
  constexpr int kUri = 6;
  constexpr int kIp = 7;
  for (const mbedtls_x509_sequence* san = &names; san != nullptr; san = san->next) {
    if (san->buf.p == nullptr ||
        (san->buf.tag & MBEDTLS_ASN1_TAG_CLASS_MASK) != MBEDTLS_ASN1_CONTEXT_SPECIFIC) {
      continue;
    }
    const std::string value(reinterpret_cast<const char*>(san->buf.p), san->buf.len);
    const int kind = san->buf.tag & MBEDTLS_ASN1_TAG_VALUE_MASK;
    if (kind == kDns) {
      facts.dns_names.push_back(value);
    } else if (kind == kUri) {
      facts.uri_names.push_back(value);
    } else if (kind == kIp && (value.size() == 4 || value.size() == 16)) {
      char text[INET6_ADDRSTRLEN] = {};
      ::inet_ntop(value.size() == 4 ? AF_INET : AF_INET6, value.data(), text, sizeof text);
      facts.ip_addresses.emplace_back(text);
    }
  }
}

}  // namespace

KeyAndRequest pki_make_request(const std::string& common_name) {
  require_token(common_name, "name");
  auto key = Key::generate();
  mbedtls_x509write_csr writer;
  mbedtls_x509write_csr_init(&writer);
  mbedtls_x509write_csr_set_md_alg(&writer, MBEDTLS_MD_SHA256);
  mbedtls_x509write_csr_set_key(&writer, key->get());
  std::array<unsigned char, 4096> pem{};
  const std::string subject = "CN=" + common_name + ",O=garm-edge";
  int rc = mbedtls_x509write_csr_set_subject_name(&writer, subject.c_str());
  if (rc == 0) {
    rc = mbedtls_x509write_csr_pem(&writer, pem.data(), pem.size(), mbedtls_ctr_drbg_random,
                                   &random_generator());
  }
  mbedtls_x509write_csr_free(&writer);
  check_pki(rc, "write the certificate request");
  return {.key_pem = key->pem(), .request_pem = reinterpret_cast<const char*>(pem.data())};
}

std::string pki_sign_request(const fs::path& ca_directory, const std::string& request_pem,
                             const LeafProfile& profile) {
  require_token(profile.common_name, "name");
  VerifiedRequest request(request_pem);
  auto ca_key = Key::load(ca_directory / "ca.key");
  const auto ca_name = subject_of_certificate(ca_directory / "ca.crt");
  std::vector<std::string> usages;
  if (profile.server_auth) {
    usages.emplace_back(MBEDTLS_OID_SERVER_AUTH);
  }
  if (profile.client_auth) {
    usages.emplace_back(MBEDTLS_OID_CLIENT_AUTH);
  }
  CertificateRequest leaf{.subject = "CN=" + profile.common_name + ",O=garm-edge",
                          .is_ca = false,
                          .extended_key_usage = usages,
                          .dns_names = profile.dns_names,
                          .ip_addresses = profile.ip_addresses,
                          .validity_days = profile.validity_days,
                          .uri_names = profile.uri_names};
  return issue(leaf, request.key(), *ca_key, ca_name);
}

CertificateFacts certificate_facts(const std::string& pem) {
  mbedtls_x509_crt certificate;
  mbedtls_x509_crt_init(&certificate);
  const int rc = mbedtls_x509_crt_parse(
      &certificate, reinterpret_cast<const unsigned char*>(pem.c_str()), pem.size() + 1);
  if (rc != 0) {
    mbedtls_x509_crt_free(&certificate);
    fail_pki("the certificate does not parse", rc);
  }
  CertificateFacts facts;
  const auto identity_of_certificate = [&] {
    for (const mbedtls_x509_name* name = &certificate.subject; name != nullptr; name = name->next) {
      if (name->oid.p != nullptr && MBEDTLS_OID_CMP(MBEDTLS_OID_AT_CN, &name->oid) == 0) {
        facts.common_name.assign(reinterpret_cast<const char*>(name->val.p), name->val.len);
      }
    }
  };
  identity_of_certificate();
  facts.serial = to_hex({certificate.serial.p, certificate.serial.len});
  std::array<unsigned char, 32> digest{};
  mbedtls_sha256_ret(certificate.raw.p, certificate.raw.len, digest.data(), 0);
  facts.fingerprint_sha256 = to_hex(digest);
  facts.not_before_unix = unix_time_of(certificate.valid_from);
  facts.not_after_unix = unix_time_of(certificate.valid_to);
  read_alt_names(certificate.subject_alt_names, facts);
  mbedtls_x509_crt_free(&certificate);
  return facts;
}

}  // namespace garm_edge::net
