#include <fstream>

#include <catch2/catch.hpp>

#include "integration/api_server.hpp"
#include "integration/openssl_ca.hpp"

using namespace garm_edge;
using namespace garm_edge::testing;

namespace {

const std::string kProvider = GARM_PROVIDER_EDGE_BIN;

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
  REQUIRE(std::filesystem::exists(dir.path() / "sessions" / "rack1.tls-session"));

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
