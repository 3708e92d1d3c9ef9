#include "net/certificate_writer.hpp"

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
#include "common/unix_time.hpp"
#include "net/drbg.hpp"

namespace garm_edge::net::pki_detail {
namespace fs = std::filesystem;
[[noreturn]] void fail_pki(const std::string& what, int mbedtls_code) {
  char text[160] = {};
  mbedtls_strerror(mbedtls_code, text, sizeof text);
  throw PkiError(what + ": " + text);
}

void check_pki(int rc, const std::string& what) {
  if (rc != 0) {
    fail_pki(what, rc);
  }
}

/// DER tag-length-value; lengths up to 16 MiB (a CRL of many thousand serials).
std::string der(unsigned char tag, const std::string& value) {
  std::string out(1, static_cast<char>(tag));
  const auto length = value.size();
  if (length >= (1U << 24)) {
    throw PkiError("a DER value of " + std::to_string(length) + " bytes is too long");
  }
  if (length < 0x80) {
    out += static_cast<char>(length);
  } else {
    std::string digits;
    for (auto rest = length; rest > 0; rest >>= 8) {
      digits.insert(digits.begin(), static_cast<char>(rest & 0xff));
    }
    out += static_cast<char>(0x80 | digits.size());
    out += digits;
  }
  return out + value;
}

std::string subject_alt_names(const std::vector<std::string>& dns,
                              const std::vector<std::string>& ips,
                              const std::vector<std::string>& uris) {
  std::string names;
  for (const auto& uri : uris) {
    names += der(0x86, uri);  // [6] uniformResourceIdentifier
  }
  for (const auto& name : dns) {
    names += der(0x82, name);  // [2] dNSName
  }
  for (const auto& ip : ips) {
    std::array<unsigned char, 16> bytes{};
    if (inet_pton(AF_INET, ip.c_str(), bytes.data()) == 1) {
      names +=
          der(0x87, std::string(reinterpret_cast<const char*>(bytes.data()), 4));  // [7] iPAddress
    } else if (inet_pton(AF_INET6, ip.c_str(), bytes.data()) == 1) {
      names += der(0x87, std::string(reinterpret_cast<const char*>(bytes.data()), 16));
    } else {
      throw PkiError("\"" + ip + "\" is not an IP address");
    }
  }
  return der(0x30, names);
}

std::string issue(const CertificateRequest& request, mbedtls_pk_context* subject_key,
                  Key& issuer_key, const std::string& issuer_name) {
  mbedtls_x509write_cert writer;
  mbedtls_x509write_crt_init(&writer);
  mbedtls_mpi serial;
  mbedtls_mpi_init(&serial);
  try {
    std::array<unsigned char, 16> serial_bytes{};
    check_pki(
        mbedtls_ctr_drbg_random(&random_generator(), serial_bytes.data(), serial_bytes.size()),
        "serial");
    serial_bytes[0] &= 0x7f;  // a positive integer
    check_pki(mbedtls_mpi_read_binary(&serial, serial_bytes.data(), serial_bytes.size()), "serial");
    const auto now = std::chrono::system_clock::now();
    mbedtls_x509write_crt_set_version(&writer, MBEDTLS_X509_CRT_VERSION_3);
    mbedtls_x509write_crt_set_md_alg(&writer, MBEDTLS_MD_SHA256);
    mbedtls_x509write_crt_set_subject_key(&writer, subject_key);
    mbedtls_x509write_crt_set_issuer_key(&writer, issuer_key.get());
    check_pki(mbedtls_x509write_crt_set_serial(&writer, &serial), "serial");
    check_pki(mbedtls_x509write_crt_set_subject_name(&writer, request.subject.c_str()),
              "subject name");
    check_pki(mbedtls_x509write_crt_set_issuer_name(&writer, issuer_name.c_str()), "issuer name");
    check_pki(
        mbedtls_x509write_crt_set_validity(
            &writer, utc_text(now - std::chrono::hours(1), "%Y%m%d%H%M%S").c_str(),
            utc_text(now + std::chrono::hours(24) * request.validity_days, "%Y%m%d%H%M%S").c_str()),
        "validity");
    check_pki(mbedtls_x509write_crt_set_basic_constraints(&writer, request.is_ca ? 1 : 0,
                                                          request.is_ca ? 0 : -1),
              "basic constraints");
    check_pki(mbedtls_x509write_crt_set_subject_key_identifier(&writer), "subject key identifier");
    check_pki(mbedtls_x509write_crt_set_authority_key_identifier(&writer),
              "authority key identifier");
    const unsigned usage = request.is_ca
                               ? (MBEDTLS_X509_KU_KEY_CERT_SIGN | MBEDTLS_X509_KU_CRL_SIGN)
                               : MBEDTLS_X509_KU_DIGITAL_SIGNATURE;
    check_pki(mbedtls_x509write_crt_set_key_usage(&writer, static_cast<unsigned char>(usage)),
              "key usage");
    if (!request.extended_key_usage.empty()) {
      std::string usages;
      for (const auto& oid : request.extended_key_usage) {
        usages += der(0x06, oid);
      }
      const auto value = der(0x30, usages);
      check_pki(mbedtls_x509write_crt_set_extension(
                    &writer, MBEDTLS_OID_EXTENDED_KEY_USAGE,
                    MBEDTLS_OID_SIZE(MBEDTLS_OID_EXTENDED_KEY_USAGE), 0,
                    reinterpret_cast<const unsigned char*>(value.data()), value.size()),
                "extended key usage");
    }
    if (!request.dns_names.empty() || !request.ip_addresses.empty() || !request.uri_names.empty()) {
      const auto value =
          subject_alt_names(request.dns_names, request.ip_addresses, request.uri_names);
      check_pki(
          mbedtls_x509write_crt_set_extension(
              &writer, MBEDTLS_OID_SUBJECT_ALT_NAME, MBEDTLS_OID_SIZE(MBEDTLS_OID_SUBJECT_ALT_NAME),
              0, reinterpret_cast<const unsigned char*>(value.data()), value.size()),
          "subject alternative names");
    }
    std::array<unsigned char, 4096> pem{};
    check_pki(mbedtls_x509write_crt_pem(&writer, pem.data(), pem.size(), mbedtls_ctr_drbg_random,
                                        &random_generator()),
              "sign the certificate");
    mbedtls_x509write_crt_free(&writer);
    mbedtls_mpi_free(&serial);
    return reinterpret_cast<const char*>(pem.data());
  } catch (...) {
    mbedtls_x509write_crt_free(&writer);
    mbedtls_mpi_free(&serial);
    throw;
  }
}

/// Names become a DN ("CN=<name>") and a file name: a plain token only, so no DN component
/// or path can be smuggled in.
void require_token(const std::string& name, const std::string& what) {
  const bool ok =
      !name.empty() && name.size() <= 64 && name.front() != '.' && name.front() != '-' &&
      name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") ==
          std::string::npos &&
      name.find("..") == std::string::npos;
  if (!ok) {
    throw PkiError(what + " \"" + name.substr(0, 64) + "\" must be 1-64 of [A-Za-z0-9._-]");
  }
}

std::string subject_of_certificate(const fs::path& path) {
  mbedtls_x509_crt certificate;
  mbedtls_x509_crt_init(&certificate);
  const int rc = mbedtls_x509_crt_parse_file(&certificate, path.c_str());
  if (rc != 0) {
    mbedtls_x509_crt_free(&certificate);
    fail_pki("read " + path.string(), rc);
  }
  char name[512] = {};
  mbedtls_x509_dn_gets(name, sizeof name, &certificate.subject);
  mbedtls_x509_crt_free(&certificate);
  return name;
}

std::int64_t unix_time_of(const mbedtls_x509_time& time) {
  std::tm utc{};
  utc.tm_year = time.year - 1900;
  utc.tm_mon = time.mon - 1;
  utc.tm_mday = time.day;
  utc.tm_hour = time.hour;
  utc.tm_min = time.min;
  utc.tm_sec = time.sec;
  return static_cast<std::int64_t>(timegm(&utc));
}

}  // namespace garm_edge::net::pki_detail
