#include "provider/provider_config.hpp"

#include <catch2/catch.hpp>

#include "common/config_error.hpp"

using garm_edge::ConfigError;
using garm_edge::provider::parse_provider_config;

namespace {

const std::string kAgent = R"([[agents]]
name = "rack1-a"
url = "https://10.0.0.5:8443"
ca = "/etc/garm/edge/ca.pem"
certificate = "/etc/garm/edge/garm.pem"
key = "/etc/garm/edge/garm-key.pem"
)";

std::string error_for(const std::string& text) {
  try {
    parse_provider_config(text, "provider.toml");
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST_CASE("provider config: agents, timeouts and the session directory", "[config][provider]") {
  const auto config = parse_provider_config(
      "session_dir = \"/var/lib/garm/edge\"\n" + kAgent + "[timeouts]\ncreate_seconds = 900\n",
      "provider.toml");
  REQUIRE(config.agents.size() == 1);
  CHECK(config.agents[0].name == "rack1-a");
  CHECK(config.agents[0].key == "/etc/garm/edge/garm-key.pem");
  CHECK(config.create_timeout == std::chrono::seconds(900));
  CHECK(config.request_timeout == std::chrono::seconds(60));
  CHECK(config.session_dir == "/var/lib/garm/edge");
  CHECK(parse_provider_config(kAgent, "p").session_dir.empty());
}

TEST_CASE("provider config: every mistake names file, line and key, as the agent's does",
          "[config][provider]") {
  CHECK_THAT(error_for("sesion_dir = \"/x\"\n" + kAgent),
             Catch::Contains("provider.toml:1:14: top level: unknown key \"sesion_dir\""));
  CHECK_THAT(error_for(kAgent + "oops = 1\n"), Catch::Contains("unknown key \"oops\""));
  CHECK_THAT(error_for("session_dir = \"/x\"\n"),
             Catch::Contains("at least one [[agents]] entry is required"));
  CHECK_THAT(error_for(kAgent + kAgent),
             Catch::Contains("[[agents]] #2") && Catch::Contains("name must be unique"));
  auto relative = kAgent;
  relative.replace(relative.find("/etc/garm/edge/ca.pem"), 1, "");
  CHECK_THAT(error_for(relative),
             Catch::Contains(":4:") && Catch::Contains("ca must be an absolute path"));
  CHECK_THAT(error_for(kAgent + "[timeouts]\nconnect_seconds = 0\n"),
             Catch::Contains("[timeouts]: connect_seconds must be between 1 and 3600"));
  // Plain text only, as in the agent's config: an escape sequence is no name.
  CHECK_THAT(error_for(R"([[agents]]
name = "a\u001b[2J"
url = "https://x"
ca = "/a"
certificate = "/b"
key = "/c"
)"),
             Catch::Contains("name must be UTF-8 text without control characters"));
  CHECK_THAT(error_for("x = \"\xc2\xa1\"\n"), Catch::Contains("U+00A1"));
  CHECK_THAT(error_for("[[agents]\n"), Catch::StartsWith("provider.toml:1:"));
}
