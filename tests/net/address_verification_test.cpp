// Agents reached by address (lab boards without DNS names): the provider's client checks an IP
// URL against the certificate's IP SANs, which mbedTLS 2.28 alone ignores.

#include <thread>

#include <catch2/catch.hpp>

#include "common/temp_dir.hpp"
#include "net/https_client.hpp"
#include "net/pki.hpp"
#include "net/tls_server.hpp"

using namespace garm_edge;

namespace {

/// A TLS server on `address` whose certificate names exactly `dns_names` and `ip_addresses`,
/// answering every request with 200 "served".
class NamedServer {
 public:
  NamedServer(const std::string& address, std::vector<std::string> dns_names,
              std::vector<std::string> ip_addresses) {
    net::pki_init({.directory = pki(),
                   .agent_dns_names = std::move(dns_names),
                   .agent_ip_addresses = std::move(ip_addresses),
                   .client_name = "garm"});
    net::TlsServerOptions options;
    options.address = address;
    server_ = std::make_unique<net::TlsServer>(
        io_, options,
        net::TlsConfig::load(net::TlsConfig::Role::server, {.ca = pki() / "ca.crt",
                                                            .crl = "",
                                                            .certificate = pki() / "agent.crt",
                                                            .key = pki() / "agent.key"}),
        [](net::HttpRequest, net::PeerIdentity, net::TlsServer::Respond respond) {
          respond(net::HttpResponse{
              .status = 200, .content_type = "text/plain", .body = "served", .headers = {}});
        });
    server_->start();
    thread_ = std::thread([this] { io_.run(); });
  }
  ~NamedServer() {
    server_->stop();
    io_.stop();
    thread_.join();
  }
  NamedServer(const NamedServer&) = delete;
  NamedServer& operator=(const NamedServer&) = delete;

  /// One request to `url` with the PKI's client certificate: its body, or the client's error.
  std::string get(const std::string& url) const {
    try {
      net::HttpsClient client(net::parse_https_url(url),
                              net::TlsConfig::load(net::TlsConfig::Role::client,
                                                   {.ca = pki() / "ca.crt",
                                                    .crl = "",
                                                    .certificate = pki() / "clients/garm.crt",
                                                    .key = pki() / "clients/garm.key"}),
                              {});
      return client.request("GET", "/").body;
    } catch (const net::HttpsError& e) {
      return e.what();
    }
  }
  std::uint16_t port() const { return server_->port(); }

 private:
  std::filesystem::path pki() const { return dir_.path() / "pki"; }

  TempDir dir_;
  asio::io_context io_;
  std::unique_ptr<net::TlsServer> server_;
  std::thread thread_;
};

std::string url(const std::string& host, std::uint16_t port) {
  return "https://" + host + ":" + std::to_string(port);
}

}  // namespace

TEST_CASE("an agent reached by IPv4 address is verified against its certificate's IP SANs",
          "[mtls][address]") {
  SECTION("the address is in the certificate: served") {
    NamedServer server("127.0.0.1", {}, {"127.0.0.1"});
    CHECK(server.get(url("127.0.0.1", server.port())) == "served");
  }
  SECTION("another address only: refused as a name mismatch") {
    NamedServer server("127.0.0.1", {}, {"127.0.0.2"});
    const auto error = server.get(url("127.0.0.1", server.port()));
    CHECK_THAT(error, Catch::Contains("TLS handshake") &&
                          Catch::Contains("not among the certificate's IP SANs"));
  }
  SECTION("DNS names only, even one that resolves to the address: refused") {
    NamedServer server("127.0.0.1", {"localhost"}, {});
    CHECK_THAT(server.get(url("127.0.0.1", server.port())),
               Catch::Contains("not among the certificate's IP SANs"));
    CHECK(server.get(url("localhost", server.port())) == "served");  // by name, as before
  }
  SECTION("an address in the CN-like text of a DNS SAN does not count") {
    NamedServer server("127.0.0.1", {"127.0.0.1"}, {});
    CHECK_THAT(server.get(url("127.0.0.1", server.port())),
               Catch::Contains("not among the certificate's IP SANs"));
  }
}

TEST_CASE("an agent reached by IPv6 address is verified against its certificate's IP SANs",
          "[mtls][address]") {
  SECTION("match") {
    NamedServer server("::1", {}, {"::1"});
    CHECK(server.get("https://[::1]:" + std::to_string(server.port())) == "served");
  }
  SECTION("an IPv4 address of the same host does not stand for it") {
    NamedServer server("::1", {}, {"127.0.0.1"});
    CHECK_THAT(server.get("https://[::1]:" + std::to_string(server.port())),
               Catch::Contains("not among the certificate's IP SANs"));
  }
}

TEST_CASE("agent URLs with IPv6 addresses are parsed with and without a port", "[address]") {
  CHECK(net::parse_https_url("https://[::1]:9443").host == "::1");
  CHECK(net::parse_https_url("https://[::1]:9443").port == 9443);
  CHECK(net::parse_https_url("https://[fd00::5]").port == 8443);
  CHECK(net::parse_https_url("https://10.0.0.5:8443").host == "10.0.0.5");
  CHECK_THROWS_AS(net::parse_https_url("https://[::1"), net::HttpsError);
  CHECK_THROWS_AS(net::parse_https_url("https://[::1]x"), net::HttpsError);
  CHECK_THROWS_AS(net::parse_https_url("https://[::1]:"), net::HttpsError);
  CHECK_THROWS_AS(net::parse_https_url("https://[host]:1"), net::HttpsError);
  CHECK_THROWS_AS(net::parse_https_url("https://user@host:1"), net::HttpsError);
}
