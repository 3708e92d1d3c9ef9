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
#include "net/certificate_writer.hpp"
#include "net/drbg.hpp"

namespace garm_edge::net {
namespace {

namespace fs = std::filesystem;
using namespace pki_detail;  // NOLINT(google-build-using-namespace): the PKI's own parts

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

}  // namespace garm_edge::net
