#include <fstream>
#include <thread>

#include <catch2/catch.hpp>

#include "net/pki.hpp"
#include "net/tls_dial.hpp"
#include "support/api_server.hpp"
#include "support/openssl_ca.hpp"

using namespace garm_edge;
using namespace garm_edge::testing;

namespace {

CommandResult curl_with(const ApiServer& server, const std::filesystem::path& certificate) {
  auto key = certificate;
  key.replace_extension(".key");
  return run_command("curl -sS --max-time 10 --cacert " + (server.pki() / "ca.crt").string() +
                     " --cert " + certificate.string() + " --key " + key.string() + " " +
                     server.url("/healthz"));
}

}  // namespace

TEST_CASE("expired and not yet valid client certificates are refused",
          "[api][mtls][certificates]") {
  ApiServer server;
  TempDir dir;
  OpenSslCa ca(server.pki(), dir.path());
  const auto current = ca.issue_client("garm", "20250101000000Z", "20991231000000Z");
  CHECK(curl_with(server, current).output == R"({"status":"ok"})");  // the same CA, in date: served
  CHECK(curl_with(server, ca.issue_client("garm-expired", "20200101000000Z", "20210101000000Z"))
            .exit_code != 0);
  CHECK(curl_with(server, ca.issue_client("garm-future", "20980101000000Z", "20991231000000Z"))
            .exit_code != 0);
}

TEST_CASE("a revoked client is refused after a CRL reload, even resuming a saved session",
          "[api][mtls][certificates]") {
  ApiServer server;
  TempDir dir;
  // garm-provider-edge with a session directory, so its second run tries to resume.
  const auto& pki = server.pki();
  const auto config = dir.path() / "provider.toml";
  std::ofstream(config) << "session_dir = \"" << (dir.path() / "sessions").string() << "\"\n"
                        << "[[agents]]\nname = \"rack1\"\nurl = \"https://localhost:"
                        << server.port() << "\"\n"
                        << "ca = \"" << (pki / "ca.crt").string() << "\"\ncertificate = \""
                        << (pki / "clients/garm.crt").string() << "\"\nkey = \""
                        << (pki / "clients/garm.key").string() << "\"\n";
  const std::map<std::string, std::string> get{{"GARM_COMMAND", "GetInstance"},
                                               {"GARM_CONTROLLER_ID", kController},
                                               {"GARM_INSTANCE_ID", "garm-none"},
                                               {"GARM_PROVIDER_CONFIG_FILE", config.string()}};
  REQUIRE(run_like_garm(kProvider, get).exit_code == 30);  // served; session saved
  REQUIRE(std::filesystem::directory_iterator(dir.path() / "sessions") !=
          std::filesystem::directory_iterator());  // session saved

  OpenSslCa ca(pki, dir.path() / "ca");
  ca.revoke(pki / "clients/garm.crt");
  server.reload_from(pki, ca.crl());

  const auto refused = run_like_garm(kProvider, get);
  CHECK(refused.exit_code == 1);
  CHECK_THAT(refused.err, Catch::Contains("TLS handshake"));
  CHECK(server.curl(server.url("/healthz")).exit_code != 0);
  CHECK(server.curl(server.url("/healthz"), "clients/stranger").output ==
        R"({"status":"ok"})");  // not revoked
}

TEST_CASE("a reload keeps live connections of trusted clients and stops revoked ones",
          "[api][mtls][certificates]") {
  const bool revoke_this_client = GENERATE(false, true);
  INFO((revoke_this_client ? "the connected client is revoked" : "another client is revoked"));
  ApiServer server;
  TempDir dir;
  const auto& pki = server.pki();
  // One keep-alive connection: a request, a pause during which the server reloads, another.
  const std::string request = "GET /healthz HTTP/1.1\\r\\nHost: localhost\\r\\n\\r\\n";
  CommandResult session;
  std::thread client([&] {
    session = run_command("(printf '" + request + "'; sleep 1.2; printf '" + request +
                          "'; sleep 1) | timeout 10 openssl s_client -quiet -connect 127.0.0.1:" +
                          std::to_string(server.port()) + " -cert " +
                          (pki / "clients/garm.crt").string() + " -key " +
                          (pki / "clients/garm.key").string());
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  OpenSslCa ca(pki, dir.path() / "ca");
  ca.revoke(pki / (revoke_this_client ? "clients/garm.crt" : "clients/stranger.crt"));
  server.reload_from(pki, ca.crl());
  client.join();
  const auto first = session.output.find("HTTP/1.1 200");
  REQUIRE(first != std::string::npos);
  const auto second = session.output.substr(first + 1);
  if (revoke_this_client) {
    CHECK_THAT(second, Catch::Contains("HTTP/1.1 403") && Catch::Contains("no longer trusted"));
  } else {
    CHECK_THAT(second, Catch::Contains("HTTP/1.1 200"));  // the same connection, still served
  }
}

TEST_CASE("a dialled connection resumes its session, and a resumed peer the CRL names is refused",
          "[tls][certificates]") {
  ApiServer server;
  const auto& pki = server.pki();
  const auto client = [&](const std::filesystem::path& crl) {
    return net::TlsConfig::load(net::TlsConfig::Role::client,
                                {.ca = pki / "ca.crt",
                                 .crl = crl,
                                 .certificate = pki / "clients/garm.crt",
                                 .key = pki / "clients/garm.key"});
  };
  asio::io_context io;
  net::SessionMemory sessions;
  const std::string request =
      "GET /healthz HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\n\r\n";
  const auto dial = [&](const std::shared_ptr<const net::TlsConfig>& tls) {
    return net::dial_and_turn_around({.host = "localhost", .port = server.port()}, tls, request,
                                     std::chrono::steady_clock::now() + std::chrono::seconds(5),
                                     io.get_executor(), &sessions);
  };
  const auto trusting = client("");
  CHECK(dial(trusting).status == 200);
  const auto first = sessions.get(trusting->ca_tag());
  REQUIRE_FALSE(first.empty());
  CHECK(dial(trusting).status == 200);
  CHECK(sessions.get(trusting->ca_tag()) == first);  // resumed: the same session
  CHECK(sessions.get("another CA").empty());

  // The agent's certificate revoked since: the resumed session's peer is refused without a full
  // handshake (mbedTLS's own verification would name another reason).
  std::ifstream in(pki / "agent.crt");
  const auto serial =
      net::certificate_facts(std::string(std::istreambuf_iterator<char>(in), {})).serial;
  std::ofstream(pki / "crl.pem") << net::pki_make_crl(
      pki, {{.serial = serial, .revoked_at_unix = std::time(nullptr)}}, 1, 30);
  CHECK_THROWS_WITH(dial(client(pki / "crl.pem")), Catch::Contains("revoked or no longer trusted"));
}
