#include "provider/provider_config.hpp"

#include <set>
#include <sstream>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

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

std::string provider_config_error(const std::string& text) {
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

TEST_CASE("provider config: hubs alone make a fleet, and each is named once",
          "[config][provider]") {
  const std::string hub =
      "[[hubs]]\nname = \"lab\"\nurl = \"https://hub.lab:8445\"\n"
      "ca = \"/h/ca.crt\"\ncertificate = \"/h/garm.crt\"\nkey = \"/h/garm.key\"\n";
  const auto config = parse_provider_config(hub, "p");
  REQUIRE(config.hubs.size() == 1);
  CHECK(config.agents.empty());
  CHECK(config.hubs[0].urls == std::vector<std::string>{"https://hub.lab:8445"});
  CHECK(config.hubs[0].weight == 100);
  CHECK_THAT(provider_config_error(hub + hub),
             Catch::Contains("[[hubs]] #2") && Catch::Contains("unique"));
  CHECK_THAT(provider_config_error(hub + "secret = 1\n"),
             Catch::Contains("unknown key \"secret\""));

  // Several hub processes on one database: one entry, its URLs in the order preferred.
  const std::string credentials =
      "ca = \"/h/ca.crt\"\ncertificate = \"/h/garm.crt\"\nkey = \"/h/garm.key\"\n";
  const auto two = parse_provider_config(
      "[[hubs]]\nname = \"lab\"\nurls = [\"https://hub-a.lab:8445\", "
      "\"https://hub-b.lab:8445\"]\n" +
          credentials,
      "p");
  CHECK(two.hubs.at(0).urls ==
        std::vector<std::string>{"https://hub-a.lab:8445", "https://hub-b.lab:8445"});
  CHECK_THAT(provider_config_error("[[hubs]]\nname = \"lab\"\nurl = \"https://a:1\"\n"
                                   "urls = [\"https://b:1\"]\n" +
                                   credentials),
             Catch::Contains("url (one hub) or urls") && Catch::Contains("not both"));
  CHECK_THAT(provider_config_error("[[hubs]]\nname = \"lab\"\n" + credentials),
             Catch::Contains("url (one hub) or urls"));
  CHECK_THAT(provider_config_error("[[hubs]]\nname = \"lab\"\nurls = []\n" + credentials),
             Catch::Contains("1-16 https:// URLs"));
  CHECK_THAT(
      provider_config_error("[[hubs]]\nname = \"lab\"\nurls = [\"http://a:1\"]\n" + credentials),
      Catch::Contains("1-16 https:// URLs"));
}

TEST_CASE("provider config: every mistake names file, line and key, as the agent's does",
          "[config][provider]") {
  CHECK_THAT(provider_config_error("sesion_dir = \"/x\"\n" + kAgent),
             Catch::Contains("provider.toml:1:14: top level: unknown key \"sesion_dir\""));
  CHECK_THAT(provider_config_error(kAgent + "oops = 1\n"), Catch::Contains("unknown key \"oops\""));
  CHECK_THAT(provider_config_error("session_dir = \"/x\"\n"),
             Catch::Contains("at least one [[agents]] or [[hubs]] entry is required"));
  CHECK_THAT(provider_config_error(kAgent + kAgent),
             Catch::Contains("[[agents]] #2") && Catch::Contains("name must be unique"));
  auto relative = kAgent;
  relative.replace(relative.find("/etc/garm/edge/ca.pem"), 1, "");
  CHECK_THAT(provider_config_error(relative),
             Catch::Contains(":4:") && Catch::Contains("ca must be an absolute path"));
  CHECK_THAT(provider_config_error(kAgent + "[timeouts]\nconnect_seconds = 0\n"),
             Catch::Contains("[timeouts]: connect_seconds must be between 1 and 3600"));
  // Plain text only, as in the agent's config: an escape sequence is no name.
  CHECK_THAT(provider_config_error(R"([[agents]]
name = "a\u001b[2J"
url = "https://x"
ca = "/a"
certificate = "/b"
key = "/c"
)"),
             Catch::Contains("name must be UTF-8 text without control characters"));
  CHECK_THAT(provider_config_error("x = \"\xc2\xa1\"\n"), Catch::Contains("U+00A1"));
  CHECK_THAT(provider_config_error("[[agents]\n"), Catch::StartsWith("provider.toml:1:"));
}

TEST_CASE("the provider's config schema and its reader agree key by key", "[config][schema]") {
  const auto schema = nlohmann::json::parse(garm_edge::provider::provider_config_json_schema());
  const auto reader_error = [](const std::string& text) { return provider_config_error(text); };
  const auto& properties = schema.at("properties");
  for (const auto& [key, property] : properties.at("timeouts").at("properties").items()) {
    INFO(key);
    const auto with = [&](std::int64_t seconds) {
      return reader_error(kAgent + "[timeouts]\n" + key + " = " + std::to_string(seconds) + "\n");
    };
    CHECK(with(property.at("minimum")) == "no error");
    CHECK(with(property.at("maximum")) == "no error");
    CHECK_THAT(with(property.at("minimum").get<std::int64_t>() - 1), Catch::Contains(key));
    CHECK_THAT(with(property.at("maximum").get<std::int64_t>() + 1), Catch::Contains(key));
  }
  const auto& agent = properties.at("agents").at("items");
  std::set<std::string> required;
  for (const auto& key : agent.at("required")) {
    required.insert(key.get<std::string>());
  }
  std::set<std::string> optional;
  for (const auto& [key, property] : agent.at("properties").items()) {
    INFO(key);
    if (required.count(key) == 0) {
      optional.insert(key);
      continue;
    }
    // Each required key, left out, is what the reader names.
    std::string without;
    std::istringstream lines(kAgent);
    for (std::string line; std::getline(lines, line);) {
      if (!line.starts_with(key + " =")) {
        without += line + "\n";
      }
    }
    CHECK_THAT(reader_error(without), Catch::Contains(key + " is required"));
  }
  // The optional ones, at and past their limits.
  CHECK(optional == std::set<std::string>{"crl", "labels", "require_host_identity", "weight"});
  CHECK(reader_error(kAgent + "require_host_identity = true\ncrl = \"/etc/garm/crl.pem\"\n") ==
        "no error");
  CHECK_THAT(reader_error(kAgent + "require_host_identity = 1\n"),
             Catch::Contains("require_host_identity"));
  CHECK_THAT(reader_error(kAgent + "crl = \"relative.pem\"\n"), Catch::Contains("crl"));
  const auto& weight = agent.at("properties").at("weight");
  for (const auto& [value, fine] : std::vector<std::pair<std::int64_t, bool>>{
           {weight.at("minimum"), true},
           {weight.at("maximum"), true},
           {weight.at("minimum").get<std::int64_t>() - 1, false},
           {weight.at("maximum").get<std::int64_t>() + 1, false}}) {
    CHECK((reader_error(kAgent + "weight = " + std::to_string(value) + "\n") == "no error") ==
          fine);
  }
  CHECK(reader_error(kAgent + "labels = [\"gpu\", \"rack1\"]\n") == "no error");
  CHECK_THAT(reader_error(kAgent + "labels = [1]\n"), Catch::Contains("labels: each entry"));
  for (const auto& policy : properties.at("placement").at("enum")) {
    CHECK(reader_error("placement = " + policy.dump() + "\n" + kAgent) == "no error");
  }
  CHECK_THAT(reader_error("placement = \"random\"\n" + kAgent),
             Catch::Contains("placement must be spread or pack"));
  CHECK(reader_error("session_dir = \"/x\"\n" + kAgent) == "no error");
  CHECK(properties.contains("session_dir"));
}

TEST_CASE("provider config: a fleet quota names a controller once, within the schema's bounds",
          "[config][provider][shares]") {
  const auto schema = nlohmann::json::parse(garm_edge::provider::provider_config_json_schema());
  const auto& quota = schema.at("properties").at("quotas").at("items");
  const std::string controller =
      "[[quotas]]\ncontroller = \"9DCF590A-1192-4a9c-b3e4-e0902974c2c0\"\n";
  for (const auto& [key, property] : quota.at("properties").items()) {
    if (key == "controller") {
      continue;
    }
    INFO(key);
    const auto with = [&](std::int64_t value) {
      return provider_config_error(kAgent + controller + key + " = " + std::to_string(value) +
                                   "\n");
    };
    CHECK(with(property.at("minimum")) == "no error");
    CHECK(with(property.at("maximum")) == "no error");
    CHECK_THAT(with(property.at("maximum").get<std::int64_t>() + 1), Catch::Contains(key));
  }
  const auto config = garm_edge::provider::parse_provider_config(
      kAgent + controller + "max_instances = 40\nmax_vcpus = 80\n", "provider.toml");
  REQUIRE(config.quotas.size() == 1);
  CHECK(config.find_quota("9dcf590a-1192-4a9c-b3e4-e0902974c2c0")->max_instances == 40);
  CHECK(config.quotas[0].max_memory_mib == 0);  // not bounded
  CHECK_THAT(provider_config_error(kAgent + controller + controller),
             Catch::Contains("named once"));
  CHECK_THAT(provider_config_error(kAgent + "[[quotas]]\ncontroller = \"team-a\"\n"),
             Catch::Contains("controller must be a garm controller's UUID"));
  CHECK_THAT(provider_config_error(kAgent + controller + "max_jobs = 3\n"),
             Catch::Contains("max_jobs"));
}

TEST_CASE("provider config: an empty session_dir is a mistake, not 'no sessions'",
          "[config][provider]") {
  CHECK_THAT(provider_config_error("session_dir = \"\"\n" + kAgent),
             Catch::Contains("session_dir is required"));
}
