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

// Certificate revocation lists: mbedTLS 2.28 reads them but has no writer, so they are written here
// in DER, and checked against the CA before anyone is given one.
namespace garm_edge::net {
namespace {

namespace fs = std::filesystem;
using namespace pki_detail;  // NOLINT(google-build-using-namespace): the PKI's own parts

/// An X.509 time as DER: UTCTime through 2049, GeneralizedTime after (RFC 5280 4.1.2.5).
std::string der_time(std::int64_t unix_seconds) {
  const auto seconds = static_cast<std::time_t>(unix_seconds);
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char text[24] = {};
  std::strftime(text, sizeof text, "%Y%m%d%H%M%SZ", &utc);
  // UTCTime is the same text without the century.
  const bool utc_time = utc.tm_year + 1900 < 2050;
  return utc_time ? der(0x17, text + 2) : der(0x18, text);
}

/// A non-negative INTEGER from big-endian bytes (a leading zero where the top bit is set).
std::string der_unsigned(std::string bytes) {
  while (bytes.size() > 1 && bytes.front() == '\0' && (bytes[1] & 0x80) == 0) {
    bytes.erase(bytes.begin());
  }
  if (bytes.empty() || (bytes.front() & 0x80) != 0) {
    bytes.insert(bytes.begin(), '\0');
  }
  return der(0x02, bytes);
}

std::string der_unsigned(std::uint64_t value) {
  std::string bytes;
  for (int shift = 56; shift >= 0; shift -= 8) {
    bytes += static_cast<char>((value >> shift) & 0xff);
  }
  return der_unsigned(bytes);
}

/// The CA certificate's subject exactly as it is encoded: a CRL's issuer must match it byte
/// for byte (mbedTLS compares the raw names).
std::string raw_subject_of(const fs::path& ca_certificate) {
  mbedtls_x509_crt certificate;
  mbedtls_x509_crt_init(&certificate);
  const int rc = mbedtls_x509_crt_parse_file(&certificate, ca_certificate.c_str());
  if (rc != 0) {
    mbedtls_x509_crt_free(&certificate);
    fail_pki("read " + ca_certificate.string(), rc);
  }
  std::string subject(reinterpret_cast<const char*>(certificate.subject_raw.p),
                      certificate.subject_raw.len);
  mbedtls_x509_crt_free(&certificate);
  return subject;
}

}  // namespace

std::string pki_make_crl(const fs::path& ca_directory,
                         const std::vector<RevokedCertificate>& revoked, std::uint64_t number,
                         int validity_days) {
  constexpr std::int64_t kClockSkew = 3600;
  // ecdsa-with-SHA256 (1.2.840.10045.4.3.2) and cRLNumber (2.5.29.20)
  const std::string algorithm = der(0x30, der(0x06, "\x2a\x86\x48\xce\x3d\x04\x03\x02"));
  const std::string crl_number_oid = der(0x06, "\x55\x1d\x14");
  const auto now = std::chrono::duration_cast<std::chrono::seconds>(
                       std::chrono::system_clock::now().time_since_epoch())
                       .count();
  std::string entries;
  for (const auto& certificate : revoked) {
    // mbedTLS counts a serial revoked only once its revocation date is past on its own clock.
    const auto serial = from_hex(certificate.serial);
    if (!serial || serial->empty()) {
      throw PkiError("\"" + certificate.serial.substr(0, 80) + "\" is not a serial number");
    }
    entries += der(0x30, der_unsigned(*serial) +
                             der_time(std::min(certificate.revoked_at_unix, now) - kClockSkew));
  }
  std::string tbs = der(0x02, "\x01") + algorithm + raw_subject_of(ca_directory / "ca.crt") +
                    der_time(now - kClockSkew) +
                    der_time(now + std::int64_t{validity_days} * 86400);
  if (!entries.empty()) {
    tbs += der(0x30, entries);
  }
  tbs += der(0xa0, der(0x30, der(0x30, crl_number_oid + der(0x04, der_unsigned(number)))));
  tbs = der(0x30, tbs);

  auto ca_key = Key::load(ca_directory / "ca.key");
  std::array<unsigned char, 32> hash{};
  mbedtls_sha256_ret(reinterpret_cast<const unsigned char*>(tbs.data()), tbs.size(), hash.data(),
                     0);
  std::array<unsigned char, MBEDTLS_PK_SIGNATURE_MAX_SIZE> signature{};
  std::size_t signature_length = 0;
  check_pki(
      mbedtls_pk_sign(ca_key->get(), MBEDTLS_MD_SHA256, hash.data(), hash.size(), signature.data(),
                      &signature_length, mbedtls_ctr_drbg_random, &random_generator()),
      "sign the CRL");
  const auto crl =
      der(0x30, tbs + algorithm +
                    der(0x03, std::string(1, '\0') +
                                  std::string(reinterpret_cast<const char*>(signature.data()),
                                              signature_length)));
  std::string pem(crl.size() * 2 + 128, '\0');
  std::size_t written = 0;
  check_pki(
      mbedtls_pem_write_buffer("-----BEGIN X509 CRL-----\n", "-----END X509 CRL-----\n",
                               reinterpret_cast<const unsigned char*>(crl.data()), crl.size(),
                               reinterpret_cast<unsigned char*>(pem.data()), pem.size(), &written),
      "encode the CRL");
  pem.resize(written > 0 ? written - 1 : 0);  // without the terminating NUL it counts
  return pem;
}

std::int64_t pki_check_crl(const fs::path& ca_file, const std::string& crl_pem) {
  mbedtls_x509_crt ca;
  mbedtls_x509_crt_init(&ca);
  mbedtls_x509_crl crl;
  mbedtls_x509_crl_init(&crl);
  const auto release = [&] {
    mbedtls_x509_crl_free(&crl);
    mbedtls_x509_crt_free(&ca);
  };
  try {
    check_pki(mbedtls_x509_crt_parse_file(&ca, ca_file.c_str()), "read " + ca_file.string());
    if (crl_pem.size() > 16 * 1024 * 1024) {
      throw PkiError("the CRL is too large");
    }
    check_pki(mbedtls_x509_crl_parse(&crl, reinterpret_cast<const unsigned char*>(crl_pem.c_str()),
                                     crl_pem.size() + 1),
              "the CRL does not parse");
    const auto* md = mbedtls_md_info_from_type(crl.sig_md);
    std::array<unsigned char, MBEDTLS_MD_MAX_SIZE> hash{};
    if (crl.next != nullptr || crl.issuer_raw.len != ca.subject_raw.len ||
        std::memcmp(crl.issuer_raw.p, ca.subject_raw.p, ca.subject_raw.len) != 0 || md == nullptr ||
        mbedtls_md(md, crl.tbs.p, crl.tbs.len, hash.data()) != 0 ||
        mbedtls_pk_verify(&ca.pk, crl.sig_md, hash.data(), mbedtls_md_get_size(md), crl.sig.p,
                          crl.sig.len) != 0) {
      throw PkiError("the CRL is not one the CA " + ca_file.string() + " signed");
    }
  } catch (...) {
    release();
    throw;
  }
  const auto issued = pki_detail::unix_time_of(crl.this_update);
  release();
  return issued;
}

}  // namespace garm_edge::net
