#include "hub/hub_store.hpp"

#include <fstream>

#include <catch2/catch.hpp>

#include "common/durable_file.hpp"
#include "common/temp_dir.hpp"
#include "hub/hub_server.hpp"
#include "net/pki.hpp"
#include "net/tls_config.hpp"
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
            .request_pem = net::pki_make_request(name.empty() ? "x" : name).request_pem,
            .dns_names = {},
            .ip_addresses = {}};
  }
  std::pair<hub::TokenRecord, std::string> token(unsigned uses, hub::HostNames host = {},
                                                 std::vector<std::string> labels = {}) {
    return store.create_token(std::chrono::hours(1), uses, std::move(labels), std::move(host),
                              kNow);
  }
  std::size_t agent_files() const {
    return static_cast<std::size_t>(
        std::distance(std::filesystem::directory_iterator(state / "agents"),
                      std::filesystem::directory_iterator{}));
  }
  std::filesystem::path write(const std::string& name, const std::string& text) const {
    const auto path = dir.path() / name;
    std::ofstream(path) << text;
    return path;
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

constexpr hub::UnixSeconds kDay = 86400;

}  // namespace

TEST_CASE("a token enrols an agent once per use, with a certificate the fleet CA signed",
          "[hub][enrolment]") {
  Fixture f;
  const auto [token, secret] = f.token(2, {.name_pattern = "rack1-host*"}, {"lab"});
  const auto enrolled = f.store.enrol(f.request(token.id, secret), kNow + 10);
  const auto facts = net::certificate_facts(enrolled.certificate_pem);
  CHECK(facts.common_name == "rack1-host03");
  CHECK(enrolled.agent.labels == std::vector<std::string>{"lab"});
  REQUIRE(enrolled.agent.certificates.size() == 1);
  CHECK(enrolled.agent.certificates.front().serial == facts.serial);
  CHECK(f.store.agent("rack1-host03")->accepts(facts.serial, kNow + 20));
  CHECK_FALSE(f.store.agent("rack1-host03")->accepts("00", kNow + 20));

  // OpenSSL agrees: the CA signed it, for both ends of TLS, with the host's URI and no name
  // garm could reach it by directly (the token fixed none).
  const auto agent_crt = f.write("agent.crt", enrolled.certificate_pem);
  const auto verified = run_command("openssl verify -CAfile " + (f.state / "pki/ca.crt").string() +
                                    " " + agent_crt.string());
  CHECK(verified.exit_code == 0);
  const auto text = run_command("openssl x509 -noout -text -in " + agent_crt.string());
  CHECK_THAT(text.output, Catch::Contains("URI:urn:garm-edge:agent:rack1-host03") &&
                              Catch::Contains("TLS Web Server Authentication") &&
                              Catch::Contains("TLS Web Client Authentication"));
  CHECK(facts.dns_names.empty());
  CHECK(facts.ip_addresses.empty());

  CHECK(f.store.tokens().front().uses_left == 1);
  f.store.enrol(f.request(token.id, secret, "rack1-host04"), kNow + 30);
  CHECK_THAT(refusal_of([&] { f.store.enrol(f.request(token.id, secret, "rack1-host05"), kNow); }),
             Catch::Contains("used up"));
  CHECK(f.agent_files() == 2);
}

TEST_CASE("refused enrolments say why and issue nothing", "[hub][enrolment]") {
  Fixture f;
  const auto [token, secret] = f.store.create_token(std::chrono::seconds(60), 1, {}, {}, kNow);
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

TEST_CASE("a token makes only the host the operator named, with only the names it grants",
          "[hub][enrolment][roles]") {
  Fixture f;
  const auto [token, secret] = f.token(
      1, {.name = "r1-amd-01", .dns_names = {"r1-amd-01.lab"}, .ip_addresses = {"10.0.0.5"}});

  // Another name, or a name garm reaches another host by, is refused; nothing is used up.
  CHECK_THAT(refusal_of([&] { f.store.enrol(f.request(token.id, secret, "r1-amd-02"), kNow); }),
             Catch::Contains("is for host r1-amd-01"));
  auto greedy = f.request(token.id, secret, "r1-amd-01");
  greedy.dns_names = {"r1-amd-01.lab", "hub.lab"};
  CHECK_THAT(refusal_of([&] { f.store.enrol(greedy, kNow); }),
             Catch::Contains("grants the DNS names r1-amd-01.lab"));
  greedy = f.request(token.id, secret, "r1-amd-01");
  greedy.ip_addresses = {"10.0.0.9"};
  CHECK_THAT(refusal_of([&] { f.store.enrol(greedy, kNow); }), Catch::Contains("10.0.0.5 only"));
  CHECK(f.store.tokens().front().uses_left == 1);

  // Asking for nothing gets the token's names, and the certificate carries exactly those.
  const auto enrolled = f.store.enrol(f.request(token.id, secret, ""), kNow);
  const auto facts = net::certificate_facts(enrolled.certificate_pem);
  CHECK(facts.common_name == "r1-amd-01");
  CHECK(facts.dns_names == std::vector<std::string>{"r1-amd-01.lab"});
  CHECK(facts.ip_addresses == std::vector<std::string>{"10.0.0.5"});
  CHECK(facts.uri_names == std::vector<std::string>{"urn:garm-edge:agent:r1-amd-01"});

  // Tokens without a fixed name make hub-only hosts: no DNS or IP name, not even asked for.
  const auto [open, open_secret] = f.token(1);
  auto asking = f.request(open.id, open_secret, "lab-board-7");
  asking.dns_names = {"r1-amd-01.lab"};
  CHECK_THAT(refusal_of([&] { f.store.enrol(asking, kNow); }), Catch::Contains("grants the DNS"));
  const auto [pattern, pattern_secret] = f.token(1, {.name_pattern = "lab-board-*"});
  CHECK_THAT(
      refusal_of([&] { f.store.enrol(f.request(pattern.id, pattern_secret, "r9-x"), kNow); }),
      Catch::Contains("is for hosts lab-board-*"));
  CHECK(
      net::certificate_facts(
          f.store.enrol(f.request(pattern.id, pattern_secret, "lab-board-7"), kNow).certificate_pem)
          .dns_names.empty());

  // The operator's own mistakes are refused when the token is made.
  CHECK_THAT(refusal_of([&] { f.token(1, {.dns_names = {"x.lab"}}); }),
             Catch::Contains("go with one host name"));
  CHECK_THAT(refusal_of([&] { f.token(3, {.name = "r2"}); }), Catch::Contains("one use"));
  CHECK_THAT(refusal_of([&] { f.token(1, {.name = "r1-amd-01"}); }),
             Catch::Contains("enrolled already"));
  CHECK_THAT(refusal_of([&] { f.token(1, {.name_pattern = "../*"}); }),
             Catch::Contains("name pattern"));
  // A pattern made to backtrack is matched in linear time (a token holder picks the name).
  const auto [slow, slow_secret] = f.token(1, {.name_pattern = "a*a*a*a*a*a*a*a*a*a*a*a*a*a*b"});
  CHECK_THAT(refusal_of([&] {
               f.store.enrol(f.request(slow.id, slow_secret, std::string(64, 'a')), kNow);
             }),
             Catch::Contains("is for hosts"));
}

TEST_CASE("no host may take a client's or the hub's name, and no client a host's",
          "[hub][enrolment][roles]") {
  Fixture f;
  f.store.reserve_client_names({"tenant-a"});
  const auto [token, secret] = f.token(10);
  // garm's certificate from init, a [[clients]] identity in any case, the hub's own CN.
  for (const auto* name : {"garm", "GARM", "tenant-a", "garm-edge-hub"}) {
    CHECK_THAT(refusal_of([&] { f.store.enrol(f.request(token.id, secret, name), kNow); }),
               Catch::Contains("no host may be named so"));
  }
  CHECK_THAT(refusal_of([&] { f.token(1, {.name = "garm"}); }),
             Catch::Contains("no host may be named so"));
  CHECK(f.agent_files() == 0);

  f.store.enrol(f.request(token.id, secret, "r1"), kNow);
  CHECK_THAT(refusal_of([&] { f.store.issue_client("r1"); }), Catch::Contains("a host's"));
  CHECK_THAT(refusal_of([&] { f.store.issue_client("garm-edge-hub"); }),
             Catch::Contains("the hub's"));
  const auto issued = f.store.issue_client("operator");
  CHECK(net::certificate_facts(*read_file(issued.certificate)).uri_names ==
        std::vector<std::string>{"urn:garm-edge:client:operator"});
  CHECK_THAT(refusal_of([&] { f.store.enrol(f.request(token.id, secret, "operator"), kNow); }),
             Catch::Contains("client certificate's name"));
  // Revoked, its files gone: the name stays a client's.
  REQUIRE(f.store.revoke_client("operator", kNow));
  CHECK_THAT(refusal_of([&] { f.store.enrol(f.request(token.id, secret, "operator"), kNow); }),
             Catch::Contains("revoked client's name"));

  // The hub's certificate claims the hub's role; garm's the client's.
  CHECK(net::certificate_facts(*read_file(f.state / "pki/hub.crt")).uri_names ==
        std::vector<std::string>{"urn:garm-edge:hub:garm-edge-hub"});
  CHECK(net::certificate_facts(*read_file(f.state / "pki/clients/garm.crt")).uri_names ==
        std::vector<std::string>{"urn:garm-edge:client:garm"});
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

TEST_CASE("renewal keeps the newest and the shown certificate, only when due, once per interval",
          "[hub][renewal]") {
  Fixture f;
  const auto [token, secret] = f.token(3);
  const auto first = f.store.enrol(f.request(token.id, secret), kNow);
  CHECK_THAT(refusal_of([&] { f.store.enrol(f.request(token.id, secret), kNow); }),
             Catch::Contains("enrolled already"));
  const auto c1 = first.agent.certificates.front().serial;
  const auto renew = [&](const std::string& serial, hub::UnixSeconds at) {
    return net::certificate_facts(f.store
                                      .renew("rack1-host03", serial,
                                             net::pki_make_request("rack1-host03").request_pem, at)
                                      .certificate_pem)
        .serial;
  };
  // Two thirds of 30 days must pass first: a stolen key cannot mint certificates at will.
  CHECK_THAT(refusal_of([&] { renew(c1, kNow + 5); }), Catch::Contains("not due"));
  CHECK_THAT(refusal_of([&] { renew(c1, kNow + 19 * kDay); }), Catch::Contains("not due"));
  const auto generation = f.store.agents_generation();
  // Due as the agent reckons it: a third of the certificate's own life (30 days and the hour
  // its start is set back), so the agent's first try is not refused.
  const auto due = kNow + 20 * kDay - 15 * 60;
  const auto c2 = renew(c1, due);
  CHECK(f.store.agent("rack1-host03")->accepts(c1, due));
  CHECK(f.store.agent("rack1-host03")->accepts(c2, due));
  CHECK(f.store.agents_generation() != generation);
  // Once per ten minutes per host.
  CHECK_THAT(refusal_of([&] { renew(c1, due + 60); }),
             Catch::Contains("at most one renewal per 600 s"));
  // A copy of the old key renewing again: the one it showed and the new one stay, the one in
  // between is revoked (its holder finds itself refused: the copy shows).
  const auto c3 = renew(c1, due + 601);
  const auto agent = f.store.agent("rack1-host03");
  CHECK(agent->certificates.size() == 2);
  CHECK(agent->accepts(c1, due + 602));
  CHECK(agent->accepts(c3, due + 602));
  CHECK_FALSE(agent->accepts(c2, due + 602));
  const auto revoked = f.store.revoked();
  REQUIRE(revoked.size() == 1);
  CHECK(revoked.front().serial == c2);
  CHECK_THAT(refusal_of([&] { renew(c2, due + 1300); }),
             Catch::Contains("not enrolled with this certificate"));
  CHECK_THAT(refusal_of([&] {
               f.store.renew("rack1-host03", "00", net::pki_make_request("x").request_pem, kNow);
             }),
             Catch::Contains("not enrolled with this certificate"));
}

TEST_CASE("removal revokes a host's certificates in a CRL that OpenSSL and mbedTLS enforce",
          "[hub][revocation]") {
  Fixture f;
  const auto [token, secret] = f.token(2);
  const auto first = f.store.enrol(f.request(token.id, secret), kNow);
  const auto other = f.store.enrol(f.request(token.id, secret, "rack1-host04"), kNow);
  const auto agent_crt = f.write("agent.crt", first.certificate_pem);
  const auto other_crt = f.write("other.crt", other.certificate_pem);
  const auto ca = (f.state / "pki/ca.crt").string();
  const auto check_with_crl = [&](const std::filesystem::path& certificate) {
    return run_command("openssl verify -crl_check -CAfile " + ca + " -CRLfile " +
                       f.store.crl_path().string() + " " + certificate.string() + " 2>&1");
  };
  CHECK(check_with_crl(agent_crt).exit_code == 0);  // init wrote an empty CRL

  CHECK(f.store.remove("rack1-host03", kNow));
  CHECK_FALSE(f.store.agent("rack1-host03"));
  CHECK_FALSE(f.store.remove("rack1-host03", kNow));
  const auto refused = check_with_crl(agent_crt);
  CHECK(refused.exit_code != 0);
  CHECK_THAT(refused.output, Catch::Contains("revoked"));
  CHECK(check_with_crl(other_crt).exit_code == 0);
  const auto crl_text =
      run_command("openssl crl -noout -text -in " + f.store.crl_path().string() + " 2>&1");
  CHECK_THAT(crl_text.output,
             Catch::Contains("X509v3 CRL Number") && Catch::Contains("Revoked Certificates"));
  CHECK(std::filesystem::status(f.store.crl_path()).permissions() ==
        (std::filesystem::perms::owner_read | std::filesystem::perms::owner_write |
         std::filesystem::perms::group_read | std::filesystem::perms::others_read));

  // mbedTLS, as agents and the provider load it: revoked refused, the other host accepted.
  const auto tls = net::TlsConfig::load(net::TlsConfig::Role::client,
                                        {.ca = ca,
                                         .crl = f.store.crl_path(),
                                         .certificate = f.state / "pki/clients/garm.crt",
                                         .key = f.state / "pki/clients/garm.key"});
  const auto accepted_by_mbedtls = [&](const std::string& pem) {
    mbedtls_x509_crt parsed;
    mbedtls_x509_crt_init(&parsed);
    mbedtls_x509_crt_parse(&parsed, reinterpret_cast<const unsigned char*>(pem.c_str()),
                           pem.size() + 1);
    const bool accepted = tls->accepts(&parsed);
    mbedtls_x509_crt_free(&parsed);
    return accepted;
  };
  CHECK_FALSE(accepted_by_mbedtls(first.certificate_pem));
  CHECK(accepted_by_mbedtls(other.certificate_pem));

  // A client certificate revoked the same way; its files go.
  CHECK(f.store.revoke_client("garm", kNow));
  CHECK_FALSE(std::filesystem::exists(f.state / "pki/clients/garm.key"));
  CHECK(f.store.revoked().size() == 2);
  CHECK_FALSE(f.store.revoke_client("garm", kNow));

  // Agents take the hub's CRL only when the CA signed it.
  CHECK_NOTHROW(net::pki_check_crl(ca, f.store.crl_pem()));
  Fixture stranger;
  CHECK_THROWS_WITH(net::pki_check_crl(ca, stranger.store.crl_pem()),
                    Catch::Contains("not one the CA"));
  CHECK_THROWS_AS(
      net::pki_check_crl(ca, "-----BEGIN X509 CRL-----\nAAAA\n-----END X509 CRL-----\n"),
      net::PkiError);
}

TEST_CASE("a hub made before roles gets the hub's role and localhost when it starts",
          "[hub][roles]") {
  Fixture f;
  const auto pki = f.state / "pki";
  net::pki_reissue_server(pki, "hub", "garm-edge-hub", {"hub.lab"}, {"203.0.113.10"}, {});
  CHECK(net::certificate_facts(*read_file(pki / "hub.crt")).uri_names.empty());
  const auto before_roles = net::certificate_facts(*read_file(pki / "hub.crt")).serial;
  f.store.prepare_to_serve(kNow);
  const auto facts = net::certificate_facts(*read_file(pki / "hub.crt"));
  // The old one is revoked: it would pass for the hub by the rule for hubs before roles.
  REQUIRE(f.store.revoked().size() == 1);
  CHECK(f.store.revoked().front().serial == before_roles);
  CHECK(facts.uri_names == std::vector<std::string>{"urn:garm-edge:hub:garm-edge-hub"});
  CHECK(facts.dns_names == std::vector<std::string>{"hub.lab", "localhost"});
  CHECK(facts.ip_addresses == std::vector<std::string>{"203.0.113.10"});
  CHECK_NOTHROW(net::TlsConfig::load(
      net::TlsConfig::Role::server,
      {.ca = pki / "ca.crt", .crl = "", .certificate = pki / "hub.crt", .key = pki / "hub.key"}));
  const auto serial = facts.serial;
  f.store.prepare_to_serve(kNow);  // once only
  CHECK(net::certificate_facts(*read_file(pki / "hub.crt")).serial == serial);
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
