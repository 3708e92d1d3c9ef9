#include <catch2/catch.hpp>
#include <pugixml.hpp>

#include "support/test_support.hpp"
#include "wire/error.hpp"

using namespace garm_edge;
using namespace garm_edge::testing;

TEST_CASE("hostile names, images and pool IDs are refused and create nothing", "[hostile]") {
  Host host("hostile.xml");
  auto service = host.service();
  struct Case {
    std::string what;
    std::function<void(wire::BootstrapInstance&)> spoil;
  };
  const std::vector<Case> cases = {
      {"quote in name", [](auto& b) { b.name = "garm-a'b"; }},
      {"markup in name", [](auto& b) { b.name = "<domain>&amp;"; }},
      {"shell in name", [](auto& b) { b.name = "x; rm -rf /"; }},
      {"traversal in name", [](auto& b) { b.name = "../../etc/passwd"; }},
      {"5,000-character name", [](auto& b) { b.name = std::string(5000, 'a'); }},
      {"control character in name", [](auto& b) { b.name = "garm-\x1b[31m"; }},
      {"traversal in image", [](auto& b) { b.image = "../../../etc/shadow"; }},
      {"absolute image", [](auto& b) { b.image = "/etc/shadow"; }},
      {"traversal in flavor", [](auto& b) { b.flavor = "..\\small"; }},
      {"non-UUID pool", [](auto& b) { b.pool_id = "'; DROP TABLE pools; --"; }},
      {"control character in scale set name",
       [](auto& b) { b.pool_id = "evil\n-0f1e2d3c-4b5a-4968-8776-a5b4c3d2e1f0"; }},
      {"oversized label list", [](auto& b) { b.labels = std::vector<std::string>(1000, "x"); }},
      {"oversized extra specs",
       [](auto& b) {
         b.extra_specs = nlohmann::json{{"blob", std::string(1 << 20, 'x')}};
       }},
  };
  for (const auto& c : cases) {
    INFO(c.what);
    auto bootstrap = bootstrap_for("garm-hostile");
    c.spoil(bootstrap);
    CHECK_THROWS_MATCHES(service->create(kControllerId, bootstrap), agent::ServiceError,
                         Catch::Predicate<agent::ServiceError>([](const agent::ServiceError& e) {
                           return e.code() == agent::ServiceError::Code::invalid_argument;
                         }));
  }
  CHECK(host.tagged_domain_count() == 0);
  CHECK(host.store.list().empty());
}

TEST_CASE("a scale-set pool ID full of markup is carried through escaped and exact", "[hostile]") {
  Host host("hostile.xml");
  auto service = host.service();
  const std::string pool = "set <a href='x'>&amp;\"</a> ✓-0f1e2d3c-4b5a-4968-8776-a5b4c3d2e1f0";
  const auto dry = service->dry_run_create(kControllerId, bootstrap_for("garm-markup", pool));
  pugi::xml_document document;
  REQUIRE(document.load_string(dry.domain_xml.c_str()));
  CHECK(std::string(document.child("domain")
                        .child("metadata")
                        .first_child()
                        .child("garm-edge:pool-id")
                        .text()
                        .get()) == pool);

  const auto created = service->create(kControllerId, bootstrap_for("garm-markup", pool));
  CHECK(service->list(kControllerId, pool_id(pool)) == listed({created}));
  CHECK(host.hypervisor.find_by_uuid(created.provider_id)->tags.get("pool-id") ==
        std::optional<std::string_view>(pool));
  CHECK(service->remove(kControllerId, instance_ref("garm-markup")));
}

TEST_CASE("hostile instance, pool and controller references are refused where they are parsed",
          "[hostile]") {
  // The control API parses every reference before the service sees it (a 400, nothing done).
  for (const std::string& bad :
       std::vector<std::string>{"../../etc", "a'b", std::string(5000, 'x'), "<x/>", ""}) {
    INFO(bad.substr(0, 20));
    CHECK_THROWS_AS(agent::InstanceRef::parse(bad), wire::WireError);
  }
  CHECK_THROWS_AS(agent::PoolId::parse("not a pool"), wire::WireError);
  CHECK_THROWS_AS(agent::ControllerId::parse("../controller"), wire::WireError);
  CHECK(agent::InstanceRef::parse("garm-abc.1_2").str() == "garm-abc.1_2");
  CHECK(agent::InstanceRef::parse(kPool).may_be_provider_id());
  CHECK_FALSE(agent::InstanceRef::parse("garm-abc").may_be_provider_id());
}

TEST_CASE("what garm never sends is refused: control characters, URLs other than http(s)",
          "[hostile]") {
  Host host("hostile.xml");
  auto service = host.service();
  struct Case {
    std::string field;
    std::function<void(wire::BootstrapInstance&)> spoil;
  };
  const std::vector<Case> cases = {
      {"instance-token", [](auto& b) { b.instance_token = "eyJ\x01token"; }},
      {"callback-url", [](auto& b) { b.callback_url = "ftp://garm.example/api/v1/callbacks"; }},
      {"metadata-url", [](auto& b) { b.metadata_url = "file:///etc/shadow"; }},
      {"repo_url", [](auto& b) { b.repo_url = "https://github.com/org\r\nX-Evil: 1"; }},
      {"github-runner-group", [](auto& b) { b.github_runner_group = "group\x1b[2J"; }},
      {"ssh-keys[1]",
       [](auto& b) {
         b.ssh_keys = std::vector<std::string>{"ssh-ed25519 AAAA", "a\nb"};
       }},
      {"proxy_config.https_proxy", [](auto& b) { b.proxy_config.https_proxy = "http://p\tq"; }},
      {"tools[0].download_url",
       [](auto& b) {
         b.tools = std::vector<wire::RunnerApplicationDownload>{{.os = "linux",
                                                                 .architecture = "x64",
                                                                 .download_url = "ftp://x/y.tar.gz",
                                                                 .filename = "y.tar.gz",
                                                                 .temp_download_token = {},
                                                                 .sha256_checksum = {}}};
       }},
      {"user_data_options.extra_packages[0]",
       [](auto& b) { b.user_data_options.extra_packages = std::vector<std::string>{"curl\nx"}; }},
  };
  for (const auto& c : cases) {
    INFO(c.field);
    auto bootstrap = bootstrap_for("garm-hostile");
    c.spoil(bootstrap);
    try {
      service->create(kControllerId, bootstrap);
      FAIL("the create was accepted");
    } catch (const agent::ServiceError& e) {
      CHECK(e.code() == agent::ServiceError::Code::invalid_argument);
      CHECK_THAT(e.what(), Catch::Contains(c.field) && !Catch::Contains("eyJ"));
    }
    const auto lines = host.log.lines();
    REQUIRE_FALSE(lines.empty());
    CHECK_THAT(lines.back(), Catch::Contains("create garm-hostile"));
  }
  CHECK(host.tagged_domain_count() == 0);
  CHECK(host.store.list().empty());
}
