#include "net/pki.hpp"

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
#include "net/drbg.hpp"

namespace garm_edge::net {
namespace {

namespace fs = std::filesystem;

constexpr int kCaValidityDays = 3650;
constexpr int kLeafValidityDays = 825;

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

  static std::unique_ptr<Key> load(const fs::path& path) {
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

std::string validity_time(std::chrono::system_clock::time_point when) {
  const std::time_t seconds = std::chrono::system_clock::to_time_t(when);
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char text[16] = {};
  std::strftime(text, sizeof text, "%Y%m%d%H%M%S", &utc);
  return text;
}

struct CertificateRequest {
  std::string subject;  // a DN such as "CN=garm"
  bool is_ca = false;
  std::vector<std::string> extended_key_usage;  // OIDs; none for a CA
  std::vector<std::string> dns_names;
  std::vector<std::string> ip_addresses;
  int validity_days = kLeafValidityDays;
  std::vector<std::string> uri_names = {};
};

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
    check_pki(mbedtls_x509write_crt_set_validity(
                  &writer, validity_time(now - std::chrono::hours(1)).c_str(),
                  validity_time(now + std::chrono::hours(24) * request.validity_days).c_str()),
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

void write_file(const fs::path& path, const std::string& contents, mode_t mode) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) {
    throw PkiError("cannot write " + path.string() + ": " + std::strerror(errno));
  }
  const bool ok =
      ::fchmod(fd, mode) == 0 &&
      ::write(fd, contents.data(), contents.size()) == static_cast<ssize_t>(contents.size()) &&
      ::fsync(fd) == 0;
  const int error = errno;
  ::close(fd);
  if (!ok) {
    throw PkiError("cannot write " + path.string() + ": " + std::strerror(error));
  }
}

void make_directory(const fs::path& path, mode_t mode) {
  if (::mkdir(path.c_str(), mode) != 0 && errno != EEXIST) {
    throw PkiError("cannot create " + path.string() + ": " + std::strerror(errno));
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

IssuedFiles write_leaf(const fs::path& certificate_path, const fs::path& key_path,
                       const CertificateRequest& request, Key& ca_key, const std::string& ca_name) {
  if (fs::exists(key_path) || fs::exists(certificate_path)) {
    throw PkiError(certificate_path.string() + " already exists; refusing to replace it");
  }
  auto key = Key::generate();
  const auto certificate = issue(request, key->get(), ca_key, ca_name);
  write_file(key_path, key->pem(), 0600);
  write_file(certificate_path, certificate, 0644);
  return {certificate_path, key_path};
}

}  // namespace

void pki_init(const PkiInitOptions& options) {
  const auto& dir = options.directory;
  require_token(options.client_name, "client name");
  for (const auto& name : options.agent_dns_names) {
    if (name.empty() || name.find_first_not_of(
                            "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-") !=
                            std::string::npos) {
      throw PkiError("\"" + name + "\" is not a DNS name");
    }
  }
  make_directory(dir, 0755);
  if (fs::exists(dir / "ca.key") || fs::exists(dir / "ca.crt")) {
    throw PkiError(dir.string() + " already holds a CA; refusing to replace it");
  }
  make_directory(dir / "clients", 0755);

  const std::string ca_name = "CN=garm-edge CA,O=garm-edge";
  auto ca_key = Key::generate();
  CertificateRequest ca{.subject = ca_name,
                        .is_ca = true,
                        .extended_key_usage = {},
                        .dns_names = {},
                        .ip_addresses = {},
                        .validity_days = kCaValidityDays};
  const auto ca_certificate = issue(ca, ca_key->get(), *ca_key, ca_name);
  write_file(dir / "ca.key", ca_key->pem(), 0600);
  write_file(dir / "ca.crt", ca_certificate, 0644);

  CertificateRequest agent{.subject = "CN=" + options.server_common_name + ",O=garm-edge",
                           .is_ca = false,
                           .extended_key_usage = {MBEDTLS_OID_SERVER_AUTH},
                           .dns_names = options.agent_dns_names,
                           .ip_addresses = options.agent_ip_addresses,
                           .validity_days = kLeafValidityDays,
                           .uri_names = options.server_uri_names};
  write_leaf(dir / (options.server_file_stem + ".crt"), dir / (options.server_file_stem + ".key"),
             agent, *ca_key, ca_name);
  pki_issue_client(dir, options.client_name, options.client_uri_names);
}

IssuedFiles pki_issue_client(const fs::path& directory, const std::string& name,
                             const std::vector<std::string>& uri_names) {
  require_token(name, "client name");
  auto ca_key = Key::load(directory / "ca.key");
  const auto ca_name = subject_of_certificate(directory / "ca.crt");
  make_directory(directory / "clients", 0755);
  CertificateRequest client{.subject = "CN=" + name + ",O=garm-edge",
                            .is_ca = false,
                            .extended_key_usage = {MBEDTLS_OID_CLIENT_AUTH},
                            .dns_names = {},
                            .ip_addresses = {},
                            .validity_days = kLeafValidityDays,
                            .uri_names = uri_names};
  return write_leaf(directory / "clients" / (name + ".crt"),
                    directory / "clients" / (name + ".key"), client, *ca_key, ca_name);
}

void pki_reissue_server(const fs::path& directory, const std::string& stem,
                        const std::string& common_name, const std::vector<std::string>& dns_names,
                        const std::vector<std::string>& ip_addresses,
                        const std::vector<std::string>& uri_names) {
  require_token(stem, "file name");
  auto ca_key = Key::load(directory / "ca.key");
  const auto ca_name = subject_of_certificate(directory / "ca.crt");
  const CertificateRequest server{.subject = "CN=" + common_name + ",O=garm-edge",
                                  .is_ca = false,
                                  .extended_key_usage = {MBEDTLS_OID_SERVER_AUTH},
                                  .dns_names = dns_names,
                                  .ip_addresses = ip_addresses,
                                  .validity_days = kLeafValidityDays,
                                  .uri_names = uri_names};
  auto key = Key::generate();
  const auto certificate = issue(server, key->get(), *ca_key, ca_name);
  const auto install = [&](const std::string& suffix, const std::string& contents, mode_t mode) {
    const auto target = directory / (stem + suffix);
    const auto temp = directory / ("." + stem + suffix + ".new");
    write_file(temp, contents, mode);
    if (::rename(temp.c_str(), target.c_str()) != 0) {
      throw PkiError("cannot replace " + target.string() + ": " + std::strerror(errno));
    }
  };
  install(".key", key->pem(), 0600);
  install(".crt", certificate, 0644);
}

namespace {

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

namespace {

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

void pki_check_crl(const fs::path& ca_file, const std::string& crl_pem) {
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
  release();
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
