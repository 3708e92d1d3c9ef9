#include "hub/hub_store.hpp"

#include <fstream>

#include <catch2/catch.hpp>

#include "common/temp_dir.hpp"
#include "hub/hub_server.hpp"
#include "net/pki.hpp"
#include "support/run_command.hpp"
#include "wire/base64.hpp"
#include "wire/join_token.hpp"
#include "wire/relay_framing.hpp"

using namespace garm_edge;
using garm_edge::testing::run_command;

namespace {

// Certificates are issued for the real clock: "now" in these tests is the real now.
const hub::UnixSeconds kNow = std::chrono::duration_cast<std::chrono::seconds>(
                                  std::chrono::system_clock::now().time_since_epoch())
                                  .count();

struct Fixture {
  TempDir dir;
  std::filesystem::path state = dir.path() / "hub";
  hub::HubStore store = [this] {
    hub::HubStore::init(state,
                        {.dns_names = {"hub.lab"}, .ip_addresses = {}, .client_name = "garm"});
    return hub::HubStore(state);
  }();

  hub::EnrolmentRequest request(const std::string& token_id, const std::string& secret,
                                const std::string& name = "rack1-host03") {
    return {.token_id = token_id,
            .secret = secret,
            .name = name,
            .request_pem = net::pki_make_request(name).request_pem,
            .dns_names = {},
            .ip_addresses = {"10.0.0.5"}};
  }
  std::size_t agent_files() const {
    return static_cast<std::size_t>(
        std::distance(std::filesystem::directory_iterator(state / "agents"),
                      std::filesystem::directory_iterator{}));
  }
};

std::string refusal_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const hub::Refused& e) {
    return e.what();
  }
  return "not refused";
}

}  // namespace

TEST_CASE("a token enrols an agent once per use, with a certificate the fleet CA signed",
          "[hub][enrolment]") {
  Fixture f;
  const auto [token, secret] = f.store.create_token(std::chrono::hours(1), 2, {"lab"}, kNow);
  const auto enrolled = f.store.enrol(f.request(token.id, secret), kNow + 10);
  const auto facts = net::certificate_facts(enrolled.certificate_pem);
  CHECK(facts.common_name == "rack1-host03");
  CHECK(enrolled.agent.labels == std::vector<std::string>{"lab"});
  REQUIRE(enrolled.agent.certificates.size() == 1);
  CHECK(enrolled.agent.certificates.front().serial == facts.serial);
  CHECK(f.store.agent("rack1-host03")->accepts(facts.serial, kNow + 20));
  CHECK_FALSE(f.store.agent("rack1-host03")->accepts("00", kNow + 20));

  // OpenSSL agrees: the CA signed it, for both ends of TLS, with the agent's URI and address.
  std::ofstream(f.dir.path() / "agent.crt") << enrolled.certificate_pem;
  const auto verified = run_command("openssl verify -CAfile " + (f.state / "pki/ca.crt").string() +
                                    " " + (f.dir.path() / "agent.crt").string());
  CHECK(verified.exit_code == 0);
  const auto text =
      run_command("openssl x509 -noout -text -in " + (f.dir.path() / "agent.crt").string());
  CHECK_THAT(text.output, Catch::Contains("URI:urn:garm-edge:agent:rack1-host03") &&
                              Catch::Contains("IP Address:10.0.0.5") &&
                              Catch::Contains("TLS Web Server Authentication") &&
                              Catch::Contains("TLS Web Client Authentication"));

  CHECK(f.store.tokens().front().uses_left == 1);
  f.store.enrol(f.request(token.id, secret, "rack1-host04"), kNow + 30);
  CHECK_THAT(refusal_of([&] { f.store.enrol(f.request(token.id, secret, "rack1-host05"), kNow); }),
             Catch::Contains("used up"));
  CHECK(f.agent_files() == 2);
}

TEST_CASE("refused enrolments say why and issue nothing", "[hub][enrolment]") {
  Fixture f;
  const auto [token, secret] = f.store.create_token(std::chrono::seconds(60), 1, {}, kNow);
  CHECK_THAT(refusal_of([&] { f.store.enrol(f.request(token.id, secret), kNow + 60); }),
             Catch::Contains("expired"));
  CHECK_THAT(refusal_of([&] { f.store.enrol(f.request(token.id, secret + "x"), kNow); }),
             Catch::Contains("wrong secret"));
  CHECK_THAT(refusal_of([&] { f.store.enrol(f.request("0123456789abcdef", secret), kNow); }),
             Catch::Contains("unknown"));
  CHECK_THAT(refusal_of([&] { f.store.enrol(f.request("../../etc/x", secret), kNow); }),
             Catch::Contains("malformed"));
  auto evil = f.request(token.id, secret);
  evil.name = "../evil";
  CHECK_THAT(refusal_of([&] { f.store.enrol(evil, kNow); }), Catch::Contains("agent name"));
  auto bad_request = f.request(token.id, secret);
  bad_request.request_pem =
      "-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n";
  CHECK_THAT(refusal_of([&] { f.store.enrol(bad_request, kNow); }),
             Catch::Contains("does not parse"));
  CHECK(f.agent_files() == 0);
  CHECK(f.store.tokens().front().uses_left == 1);  // nothing used up by a refusal
}

TEST_CASE("a request signed by another key than the one it carries is refused", "[hub][pki]") {
  Fixture f;
  auto pem = net::pki_make_request("rack1-host03").request_pem;
  // The signature is the last bytes of the DER: change one.
  const auto begin = pem.find('\n') + 1;
  const auto end = pem.find("-----END");
  std::string body;
  for (char c : pem.substr(begin, end - begin)) {
    if (c != '\n') {
      body += c;
    }
  }
  auto der = *wire::base64_decode(body);
  der.back() = static_cast<char>(der.back() ^ 0x01);
  const auto tampered = "-----BEGIN CERTIFICATE REQUEST-----\n" + wire::base64_encode(der) +
                        "\n-----END CERTIFICATE REQUEST-----\n";
  CHECK_THROWS_WITH(
      net::pki_sign_request(f.state / "pki", tampered, {.common_name = "x"}),
      Catch::Contains("signature does not verify") || Catch::Contains("does not parse"));
}

TEST_CASE(
    "an agent name is enrolled once, removal forgets it and renewal keeps the old "
    "certificate until it expires",
    "[hub][enrolment]") {
  Fixture f;
  const auto [token, secret] = f.store.create_token(std::chrono::hours(1), 3, {}, kNow);
  const auto first = f.store.enrol(f.request(token.id, secret), kNow);
  CHECK_THAT(refusal_of([&] { f.store.enrol(f.request(token.id, secret), kNow); }),
             Catch::Contains("enrolled already"));
  const auto old_serial = first.agent.certificates.front().serial;
  const auto generation = f.store.agents_generation();
  const auto renewed = f.store.renew("rack1-host03", old_serial,
                                     net::pki_make_request("rack1-host03").request_pem, kNow + 5);
  const auto new_serial = net::certificate_facts(renewed.certificate_pem).serial;
  const auto agent = f.store.agent("rack1-host03");
  CHECK(agent->accepts(old_serial, kNow + 10));
  CHECK(agent->accepts(new_serial, kNow + 10));
  CHECK_THAT(refusal_of([&] {
               f.store.renew("rack1-host03", "00", net::pki_make_request("x").request_pem, kNow);
             }),
             Catch::Contains("not enrolled with this certificate"));
  CHECK(f.store.remove("rack1-host03"));
  CHECK_FALSE(f.store.agent("rack1-host03"));
  CHECK(f.store.agents_generation() != generation);
  CHECK_FALSE(f.store.remove("rack1-host03"));
  // Enrolled again under the same name: only the new certificate counts.
  const auto again = f.store.enrol(f.request(token.id, secret), kNow);
  CHECK_FALSE(f.store.agent("rack1-host03")->accepts(old_serial, kNow));
  CHECK(again.agent.certificates.size() == 1);
}

TEST_CASE("join tokens round-trip and refuse anything else", "[hub][token]") {
  const wire::JoinToken token{.hub_url = "https://10.0.0.1:8444",
                              .ca_fingerprint = std::string(64, 'a'),
                              .id = "0123456789abcdef",
                              .secret = "s3cret"};
  const auto text = token.encode();
  CHECK(text.starts_with("gejoin1."));
  const auto decoded = wire::JoinToken::decode(text + "\n");
  REQUIRE(decoded);
  CHECK(decoded->hub_url == token.hub_url);
  CHECK(decoded->secret == token.secret);
  for (const auto* bad : {"", "gejoin1.", "gejoin1.!!!", "gejoin2.e30=", "gejoin1.e30="}) {
    CHECK_FALSE(wire::JoinToken::decode(bad));
  }
  auto wrong = token;
  wrong.hub_url = "http://10.0.0.1";
  CHECK_FALSE(wire::JoinToken::decode(wrong.encode()));
  wrong = token;
  wrong.ca_fingerprint = "abc";
  CHECK_FALSE(wire::JoinToken::decode(wrong.encode()));
}

TEST_CASE("failed enrolments are limited per address and token, and the limit passes",
          "[hub][limits]") {
  hub::EnrolmentLimiter limiter(3);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 3; ++i) {
    CHECK(limiter.allowed("10.0.0.9|aaaa", start));
    limiter.failed("10.0.0.9|aaaa", start);
  }
  CHECK_FALSE(limiter.allowed("10.0.0.9|aaaa", start));
  CHECK(limiter.allowed("10.0.0.9|bbbb", start));  // another token from behind the same NAT
  CHECK(limiter.allowed("10.0.0.9|aaaa", start + std::chrono::seconds(61)));
  // An address flood cannot grow the limiter without bound.
  for (int i = 0; i < 10000; ++i) {
    limiter.failed("10.1." + std::to_string(i) + "|x", start);
  }
  CHECK(limiter.allowed("10.0.0.9|bbbb", start));
}

TEST_CASE("a hub's framed answers are read exactly, and nothing else is", "[hub][relay]") {
  const std::string framed = "garm-edge-relay/1\na1 200 1 2\n{}a2 0 0 13\nnot connected";
  const auto answers = wire::parse_relay_framing(framed);
  REQUIRE(answers);
  REQUIRE(answers->size() == 2);
  CHECK((*answers)[0].agent == "a1");
  CHECK((*answers)[0].body == "{}");
  CHECK((*answers)[1].status == 0);
  CHECK_FALSE((*answers)[1].sent);
  CHECK((*answers)[1].body == "not connected");
  // A body holding what looks like another part stays in its own part.
  const auto nested = wire::parse_relay_framing("garm-edge-relay/1\na1 200 1 14\nx\na2 200 1 1\nx");
  REQUIRE(nested);
  CHECK(nested->size() == 1);
  for (const auto* bad : {"", "garm-edge-relay/2\n", "garm-edge-relay/1\na1 200 1 5\n{}",
                          "garm-edge-relay/1\na1 x 1 2\n{}", "garm-edge-relay/1\na1 200 2 2\n{}",
                          "garm-edge-relay/1\na1 200 1 -1\n{}"}) {
    CHECK_FALSE(wire::parse_relay_framing(bad));
  }
}
