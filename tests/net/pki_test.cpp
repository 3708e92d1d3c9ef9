#include "net/pki.hpp"

#include <fstream>
#include <sys/stat.h>

#include <catch2/catch.hpp>

#include "common/temp_dir.hpp"
#include "net/tls_config.hpp"
#include "support/run_command.hpp"

using namespace garm_edge;
using garm_edge::testing::run_command;

namespace {

/// A CA, an agent certificate for localhost and garm's client certificate in `directory`.
void init_localhost_pki(const std::filesystem::path& directory) {
  net::pki_init({.directory = directory,
                 .agent_dns_names = {"localhost"},
                 .agent_ip_addresses = {},
                 .client_name = "garm"});
}

}  // namespace

namespace {

mode_t mode_of(const std::filesystem::path& path) {
  struct stat info {};
  REQUIRE(::stat(path.c_str(), &info) == 0);
  return info.st_mode & 0777;
}

std::string openssl(const std::string& arguments) {
  const auto result = run_command("openssl " + arguments);
  INFO(result.output);
  REQUIRE(result.exit_code == 0);
  return result.output;
}

}  // namespace

TEST_CASE("pki init writes a CA, a server and a client certificate that OpenSSL accepts", "[pki]") {
  TempDir dir;
  const auto pki = dir.path() / "pki";
  net::pki_init({.directory = pki,
                 .agent_dns_names = {"agent.example", "localhost"},
                 .agent_ip_addresses = {"127.0.0.1", "::1"},
                 .client_name = "garm"});
  const auto ca = (pki / "ca.crt").string();
  CHECK_THAT(openssl("verify -CAfile " + ca + " " + (pki / "agent.crt").string()),
             Catch::Contains(": OK"));
  CHECK_THAT(
      openssl("verify -purpose sslserver -CAfile " + ca + " " + (pki / "agent.crt").string()),
      Catch::Contains(": OK"));
  CHECK_THAT(openssl("verify -purpose sslclient -CAfile " + ca + " " +
                     (pki / "clients/garm.crt").string()),
             Catch::Contains(": OK"));
  const auto server =
      openssl("x509 -noout -subject -ext subjectAltName,extendedKeyUsage,basicConstraints -in " +
              (pki / "agent.crt").string());
  CHECK_THAT(server, Catch::Contains("DNS:agent.example") && Catch::Contains("DNS:localhost") &&
                         Catch::Contains("IP Address:127.0.0.1") &&
                         Catch::Contains("IP Address:0:0:0:0:0:0:0:1") &&
                         Catch::Contains("TLS Web Server Authentication") &&
                         Catch::Contains("CA:FALSE"));
  const auto client = openssl("x509 -noout -subject -ext extendedKeyUsage -in " +
                              (pki / "clients/garm.crt").string());
  CHECK_THAT(client, Catch::Contains("CN = garm") &&
                         Catch::Contains("TLS Web Client Authentication") &&
                         !Catch::Contains("Server Authentication"));
  CHECK_THAT(openssl("x509 -noout -ext basicConstraints -in " + ca), Catch::Contains("CA:TRUE"));
  for (const auto* key : {"ca.key", "agent.key", "clients/garm.key"}) {
    INFO(key);
    CHECK(mode_of(pki / key) == 0600);
  }
}

TEST_CASE("pki init never replaces a CA, and names cannot inject DN parts or paths", "[pki]") {
  TempDir dir;
  const auto pki = dir.path() / "pki";
  init_localhost_pki(pki);
  const auto before = openssl("x509 -noout -fingerprint -in " + (pki / "ca.crt").string());
  CHECK_THROWS_WITH(net::pki_init({.directory = pki,
                                   .agent_dns_names = {},
                                   .agent_ip_addresses = {},
                                   .client_name = "garm"}),
                    Catch::Contains("already holds a CA"));
  CHECK(openssl("x509 -noout -fingerprint -in " + (pki / "ca.crt").string()) == before);
  for (const std::string& bad :
       std::vector<std::string>{"evil,CN=admin", "../../etc/x", "", "a b", ".hidden"}) {
    INFO(bad);
    CHECK_THROWS_AS(net::pki_issue_client(pki, bad), net::PkiError);
  }
  CHECK_THROWS_AS(net::pki_init({.directory = dir.path() / "other",
                                 .agent_dns_names = {"bad name"},
                                 .agent_ip_addresses = {},
                                 .client_name = "garm"}),
                  net::PkiError);
}

TEST_CASE("pki issue-client signs more clients with the existing CA", "[pki]") {
  TempDir dir;
  const auto pki = dir.path() / "pki";
  init_localhost_pki(pki);
  const auto files = net::pki_issue_client(pki, "garm-staging");
  CHECK_THAT(openssl("verify -purpose sslclient -CAfile " + (pki / "ca.crt").string() + " " +
                     files.certificate.string()),
             Catch::Contains(": OK"));
  CHECK(mode_of(files.key) == 0600);
  CHECK_THROWS_AS(net::pki_issue_client(dir.path() / "no-ca-here", "x"), net::PkiError);
}

TEST_CASE("a TLS config refuses a key that does not belong to its certificate", "[pki]") {
  TempDir dir;
  const auto pki = dir.path() / "pki";
  init_localhost_pki(pki);
  CHECK_NOTHROW(
      net::TlsConfig::load(net::TlsConfig::Role::server, {.ca = pki / "ca.crt",
                                                          .crl = "",
                                                          .certificate = pki / "agent.crt",
                                                          .key = pki / "agent.key"}));
  CHECK_THROWS_WITH(
      net::TlsConfig::load(net::TlsConfig::Role::server, {.ca = pki / "ca.crt",
                                                          .crl = "",
                                                          .certificate = pki / "agent.crt",
                                                          .key = pki / "ca.key"}),
      Catch::Contains("does not belong to certificate"));
  CHECK_THROWS_AS(
      net::TlsConfig::load(net::TlsConfig::Role::server, {.ca = pki / "missing.crt",
                                                          .crl = "",
                                                          .certificate = pki / "agent.crt",
                                                          .key = pki / "agent.key"}),
      net::TlsError);
}

TEST_CASE("a client config checks its key by the public point, and still refuses another key",
          "[pki][tls]") {
  TempDir dir;
  const auto pki = dir.path() / "pki";
  init_localhost_pki(pki);
  const auto client = [&](const std::filesystem::path& key) {
    return net::TlsConfig::load(
        net::TlsConfig::Role::client,
        {.ca = pki / "ca.crt", .crl = "", .certificate = pki / "clients/garm.crt", .key = key});
  };
  CHECK_NOTHROW(client(pki / "clients/garm.key"));
  CHECK_THROWS_WITH(client(pki / "agent.key"), Catch::Contains("does not belong to certificate"));
}

TEST_CASE("a certificate verified before is still accepted until its CRL names it", "[pki][tls]") {
  TempDir dir;
  const auto pki = dir.path() / "pki";
  init_localhost_pki(pki);
  mbedtls_x509_crt agent;
  mbedtls_x509_crt_init(&agent);
  REQUIRE(mbedtls_x509_crt_parse_file(&agent, (pki / "agent.crt").c_str()) == 0);
  const auto load = [&](const std::filesystem::path& crl) {
    return net::TlsConfig::load(net::TlsConfig::Role::client,
                                {.ca = pki / "ca.crt",
                                 .crl = crl,
                                 .certificate = pki / "clients/garm.crt",
                                 .key = pki / "clients/garm.key"});
  };
  CHECK(load("")->still_accepts(&agent));
  const auto serial_of = [](const std::filesystem::path& file) {
    std::ifstream in(file);
    return net::certificate_facts(
               std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()))
        .serial;
  };
  std::ofstream(dir.path() / "others.pem") << net::pki_make_crl(
      pki, {{.serial = serial_of(pki / "clients/garm.crt"), .revoked_at_unix = 1}}, 1, 30);
  CHECK(load(dir.path() / "others.pem")->still_accepts(&agent));
  std::ofstream(dir.path() / "revoked.pem") << net::pki_make_crl(
      pki, {{.serial = serial_of(pki / "agent.crt"), .revoked_at_unix = 1}}, 2, 30);
  CHECK_FALSE(load(dir.path() / "revoked.pem")->still_accepts(&agent));
  CHECK_FALSE(load("")->still_accepts(nullptr));
  mbedtls_x509_crt_free(&agent);
}

TEST_CASE("the client trust cache keeps only its most recently used CA bundles", "[pki][tls]") {
  TempDir dir;
  std::vector<std::string> bundles;
  for (int i = 0; i < 3; ++i) {
    const auto ca_dir = dir.path() / ("ca" + std::to_string(i));
    net::pki_init({.directory = ca_dir,
                   .agent_dns_names = {"localhost"},
                   .agent_ip_addresses = {},
                   .client_name = "garm"});
    std::ifstream file(ca_dir / "ca.crt");
    bundles.emplace_back(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
  }
  net::ClientTrustCache cache(2);
  const auto first = cache.trusting(bundles[0]);
  CHECK(cache.trusting(bundles[0]) == first);  // made once
  const auto second = cache.trusting(bundles[1]);
  cache.trusting(bundles[0]);  // the first is now the most recently used
  cache.trusting(bundles[2]);  // the second goes
  CHECK(cache.size() == 2);
  CHECK(cache.trusting(bundles[0]) == first);
  CHECK(cache.trusting(bundles[1]) != second);  // made again: it had been dropped
  CHECK(cache.size() == 2);
}
