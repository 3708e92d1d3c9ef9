#include "net/http_client.hpp"

#include <chrono>
#include <netinet/in.h>
#include <string>
#include <sys/socket.h>

#include <catch2/catch.hpp>

#include "common/temp_dir.hpp"
#include "common/unique_fd.hpp"
#include "support/fake_garm.hpp"
#include "wire/base64.hpp"

using garm_edge::TempDir;
using garm_edge::UniqueFd;
using garm_edge::net::ClientRequest;
using garm_edge::net::ClientResponse;
using garm_edge::net::HttpClientError;
using garm_edge::net::HttpClientOptions;
using garm_edge::net::parse_upstream_url;
using garm_edge::net::send_request;
using garm_edge::net::TlsConfig;
using garm_edge::net::TlsError;
using garm_edge::testing::FakeGarm;
using garm_edge::testing::FakeGarmOptions;
using nlohmann::json;

namespace {

const std::string kJitToken = "jit-instance-token";
const std::string kClassicToken = "classic-instance-token";
const std::string kScript = "#!/bin/bash\nset -e\necho \"installing the runner\"\n";
const std::string kAuthenticationFailed = R"({"error":"Authentication failed","details":""})";

std::string every_byte_value() {
  std::string bytes;
  for (int value = 0; value < 256; ++value) {
    bytes.push_back(static_cast<char>(value));
  }
  return bytes;
}

FakeGarmOptions garm_options(bool plain = false) {
  json jit = {{"runner", garm_edge::wire::base64_encode(every_byte_value())},
              {"credentials", garm_edge::wire::base64_encode(R"({"scheme":"OAuth"})")}};
  return {.plain = plain,
          .instances = {{kJitToken,
                         {{"install_script", kScript},
                          {"service_name", "actions.runner.example-org"},
                          {"jit", jit}}},
                        {kClassicToken, {{"registration_token", "AABBCCDD-registration"}}}}};
}

std::shared_ptr<const TlsConfig> trusting(const FakeGarm& garm) {
  return TlsConfig::client_trusting(garm.pki().ca_pem(), "");
}

ClientResponse call(const FakeGarm& garm, const std::string& method, const std::string& target,
                    const std::string& body = "", const std::string& token = kJitToken,
                    const HttpClientOptions& options = {}) {
  const ClientRequest request{method, target, {{"Authorization", "Bearer " + token}}, body};
  return send_request(parse_upstream_url(garm.base_url()), request, options, trusting(garm));
}

std::string logged_body(const json& logged) {
  return garm_edge::wire::base64_decode(logged.at("body").get<std::string>()).value();
}

/// Accepts connections into its backlog (the kernel completes the TCP handshake) and never
/// reads or answers: a server that hangs.
class SilentListener {
 public:
  SilentListener() : socket_(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof address;
    auto* generic = reinterpret_cast<sockaddr*>(&address);
    REQUIRE(::bind(socket_.get(), generic, length) == 0);
    REQUIRE(::listen(socket_.get(), 8) == 0);
    REQUIRE(::getsockname(socket_.get(), generic, &length) == 0);
    port_ = ntohs(address.sin_port);
  }
  std::uint16_t port() const { return port_; }

 private:
  UniqueFd socket_;
  std::uint16_t port_ = 0;
};

/// Runs `fn`, which must throw HttpClientError; returns its message and how long it took.
template <class Fn>
std::pair<std::string, std::chrono::milliseconds> failure_of(Fn fn) {
  const auto start = std::chrono::steady_clock::now();
  std::string message;
  try {
    fn();
    FAIL("no error");
  } catch (const HttpClientError& e) {
    message = e.what();
  }
  return {message, std::chrono::duration_cast<std::chrono::milliseconds>(
                       std::chrono::steady_clock::now() - start)};
}

}  // namespace

TEST_CASE("a status callback reaches garm over https with its CA as the extra bundle",
          "[http_client]") {
  const FakeGarm garm(garm_options());
  const std::string message = R"({"status":"installing","message":"downloading tools"})";
  const ClientRequest request{
      "POST",
      "/api/v1/callbacks/status",
      {{"Authorization", "Bearer " + kJitToken}, {"Content-Type", "application/json"}},
      message};
  const auto response = send_request(parse_upstream_url(garm.base_url() + "/api/v1/callbacks/"),
                                     request, {}, trusting(garm));
  CHECK(response.status == 200);
  CHECK(response.body.empty());
  CHECK(response.header("content-type") == "application/json");

  const auto requests = garm.requests();
  REQUIRE(requests.size() == 1);
  CHECK(requests[0]["method"] == "POST");
  CHECK(requests[0]["path"] == "/api/v1/callbacks/status");
  CHECK(requests[0]["headers"]["Authorization"] == "Bearer " + kJitToken);
  CHECK(requests[0]["headers"]["Host"] == "localhost:" + std::to_string(garm.port()));
  CHECK(requests[0]["headers"]["Connection"] == "close");
  CHECK(logged_body(requests[0]) == message);
}

TEST_CASE("every instance endpoint answers with and without a trailing slash", "[http_client]") {
  const FakeGarm garm(garm_options());
  for (const std::string slash : {"", "/"}) {
    for (const std::string path :
         {"/api/v1/metadata/install-script", "/api/v1/metadata/system/service-name",
          "/api/v1/metadata/systemd/unit-file", "/api/v1/metadata/credentials/runner",
          "/api/v1/metadata/credentials/credentials"}) {
      INFO(path + slash);
      CHECK(call(garm, "GET", path + slash).status == 200);
    }
    CHECK(call(garm, "POST", "/api/v1/callbacks/system-info" + slash, R"({"os_name":"Debian"})")
              .status == 200);
  }
  CHECK(call(garm, "GET", "/api/v1/metadata/runner-registration-token/", "", kClassicToken).body ==
        "AABBCCDD-registration");
}

TEST_CASE("garm's certificate must chain to a CA the client trusts", "[http_client]") {
  const FakeGarm garm(garm_options());
  const TempDir elsewhere("other-ca");
  const auto unrelated = garm_edge::testing::make_test_pki(elsewhere.path());
  const auto url = parse_upstream_url(garm.base_url());
  const ClientRequest request{"GET", "/api/v1/metadata/system/service-name", {}, ""};

  const auto [message, took] = failure_of(
      [&] { send_request(url, request, {}, TlsConfig::client_trusting(unrelated.ca_pem(), "")); });
  CHECK_THAT(message,
             Catch::Contains("TLS handshake with localhost:" + std::to_string(garm.port())));
  CHECK_THAT(message, Catch::Contains("verification failed"));
  CHECK_THAT(message, Catch::Contains("not correctly signed by the trusted CA"));

  // The system's public CAs alone do not vouch for a test CA either.
  const std::filesystem::path system_bundle = "/etc/ssl/certs/ca-certificates.crt";
  if (std::filesystem::exists(system_bundle)) {
    CHECK_THAT(failure_of([&] {
                 send_request(url, request, {}, TlsConfig::client_trusting("", system_bundle));
               }).first,
               Catch::Contains("verification failed"));
  }
  CHECK(garm.requests().empty());
}

TEST_CASE("a bad extra CA bundle or no CA at all is a configuration error", "[http_client]") {
  CHECK_THROWS_AS(TlsConfig::client_trusting("not a certificate", ""), TlsError);
  CHECK_THROWS_AS(TlsConfig::client_trusting("-----BEGIN CERTIFICATE-----\nAAAA\n"
                                             "-----END CERTIFICATE-----\n",
                                             ""),
                  TlsError);
  CHECK_THROWS_AS(TlsConfig::client_trusting("", "/nonexistent/ca-certificates.crt"), TlsError);
}

TEST_CASE("garm's certificate must carry the host name the URL uses", "[http_client]") {
  const FakeGarm garm(garm_options());
  // The certificate names only localhost: the same server reached as 127.0.0.1 is refused.
  const auto url = parse_upstream_url("https://127.0.0.1:" + std::to_string(garm.port()));
  const auto message = failure_of([&] {
                         send_request(url, {"GET", "/api/v1/metadata/system/service-name", {}, ""},
                                      {}, trusting(garm));
                       }).first;
  CHECK_THAT(message, Catch::Contains("does not match with the expected CN"));
  CHECK(garm.requests().empty());
}

TEST_CASE("https needs a trust configuration, plain http needs none", "[http_client]") {
  const FakeGarm garm(garm_options(true));
  const ClientRequest request{"GET",
                              "/api/v1/metadata/system/service-name",
                              {{"Authorization", "Bearer " + kJitToken}},
                              ""};
  const auto response = send_request(parse_upstream_url(garm.base_url()), request, {}, nullptr);
  CHECK(response.status == 200);
  CHECK(response.body == "actions.runner.example-org");
  CHECK(response.header("content-type") == "text/plain");
  CHECK_THROWS_AS(send_request(parse_upstream_url("https://localhost:1"), request, {}, nullptr),
                  HttpClientError);
}

TEST_CASE("bodies are binary-safe both ways", "[http_client]") {
  const FakeGarm garm(garm_options());
  const auto bytes = every_byte_value();
  // Not JSON: garm answers 400, and the log shows every byte arrived.
  const auto rejected = call(garm, "POST", "/api/v1/callbacks/status", bytes);
  CHECK(rejected.status == 400);
  CHECK(json::parse(rejected.body)["error"] == "Bad Request");
  CHECK(logged_body(garm.requests().back()) == bytes);

  const auto runner = call(garm, "GET", "/api/v1/metadata/credentials/runner");
  CHECK(runner.status == 200);
  CHECK(runner.body == bytes);
  CHECK(runner.header("content-type") == "application/octet-stream");
  CHECK(runner.header("content-disposition") == "attachment; filename=.runner");
}

TEST_CASE("the install script arrives complete through chunked encoding", "[http_client]") {
  const FakeGarm garm(garm_options());
  const auto script = call(garm, "GET", "/api/v1/metadata/install-script/");
  CHECK(script.status == 200);
  CHECK(script.header("transfer-encoding") == "chunked");
  CHECK_FALSE(script.header("content-length").has_value());
  CHECK(script.header("content-type") == "text/plain");
  CHECK(script.body.size() > 8 * 1024);
  CHECK(script.body.starts_with(kScript));
  CHECK(script.body.ends_with("\n# end of install script\n"));

  HttpClientOptions small;
  small.max_response_bytes = 4096;
  CHECK_THAT(failure_of([&] {
               call(garm, "GET", "/api/v1/metadata/install-script", "", kJitToken, small);
             }).first,
             Catch::Contains("the response from localhost:" + std::to_string(garm.port()) +
                             ": the body is larger than 4096 bytes"));
}

TEST_CASE("garm's error answers come back as they are", "[http_client]") {
  const FakeGarm garm(garm_options());
  const auto unknown = call(garm, "GET", "/api/v1/metadata/install-script", "", "forged-token");
  CHECK(unknown.status == 401);
  CHECK(unknown.body == kAuthenticationFailed);
  CHECK(unknown.header("content-type") == "application/json");

  const auto missing = call(garm, "GET", "/api/v1/metadata/no-such-thing");
  CHECK(missing.status == 404);
  CHECK(json::parse(missing.body)["error"] == "Not Found");

  // A JIT instance has no registration token; a classic one gets it exactly once.
  CHECK(call(garm, "GET", "/api/v1/metadata/runner-registration-token").status == 401);
  CHECK(call(garm, "GET", "/api/v1/metadata/runner-registration-token", "", kClassicToken).status ==
        200);
  CHECK(call(garm, "GET", "/api/v1/metadata/runner-registration-token", "", kClassicToken).status ==
        401);

  // After the instance reports idle, its token is dead.
  CHECK(
      call(garm, "POST", "/api/v1/callbacks/status", R"({"status":"idle","agent_id":7})").status ==
      200);
  const auto after_idle = call(garm, "GET", "/api/v1/metadata/install-script");
  CHECK(after_idle.status == 401);
  CHECK(after_idle.body == kAuthenticationFailed);
}

TEST_CASE("the query string reaches garm as sent", "[http_client]") {
  const FakeGarm garm(garm_options());
  const auto unit = call(garm, "GET", "/api/v1/metadata/systemd/unit-file?runAsUser=ci%20user");
  CHECK(unit.status == 200);
  CHECK_THAT(unit.body, Catch::Contains("User=ci user\n"));
  const auto logged = garm.requests().back();
  CHECK(logged["path"] == "/api/v1/metadata/systemd/unit-file");
  CHECK(logged["query"] == "runAsUser=ci%20user");
}

TEST_CASE("a server that never answers fails the request at its deadline", "[http_client]") {
  const SilentListener silent;
  HttpClientOptions options;
  options.request_timeout = std::chrono::milliseconds(500);
  const ClientRequest request{"GET", "/", {{"Authorization", "Bearer secret-token"}}, ""};
  const TempDir certificates("silent");
  const auto trust = TlsConfig::client_trusting(
      garm_edge::testing::make_test_pki(certificates.path()).ca_pem(), "");
  for (const std::string scheme : {"http", "https"}) {
    INFO(scheme);
    const auto url = parse_upstream_url(scheme + "://127.0.0.1:" + std::to_string(silent.port()));
    const auto [message, took] = failure_of([&] { send_request(url, request, options, trust); });
    CHECK_THAT(message, Catch::Contains("127.0.0.1:" + std::to_string(silent.port())));
    CHECK_THAT(message, Catch::Contains("timed out"));
    CHECK_THAT(message, !Catch::Contains("secret-token"));
    CHECK(took >= std::chrono::milliseconds(450));
    CHECK(took < std::chrono::milliseconds(2500));
  }
}

TEST_CASE("a refused connection names the endpoint", "[http_client]") {
  std::uint16_t port = 0;
  {
    const SilentListener closed_again;  // a port that was free a moment ago
    port = closed_again.port();
  }
  const auto message =
      failure_of([&] {
        send_request(parse_upstream_url("http://127.0.0.1:" + std::to_string(port)),
                     {"GET", "/", {}, ""}, {}, nullptr);
      }).first;
  CHECK_THAT(message, Catch::StartsWith("cannot connect to 127.0.0.1:" + std::to_string(port)));
}
