#include <catch2/catch.hpp>

#include "agent/instances/identifiers.hpp"
#include "support/service_error_matcher.hpp"
#include "support/test_support.hpp"
#include "wire/error.hpp"
#include "wire/validate.hpp"

using namespace garm_edge;
using namespace garm_edge::testing;
using agent::ServiceError;

TEST_CASE("an instance goes through create, get, list, stop, start and delete", "[lifecycle]") {
  Host host("lifecycle.xml");
  auto service = host.service();

  const auto created = service->create(kControllerId, bootstrap_for("garm-life01"));
  CHECK(created.status == wire::InstanceStatus::running);
  CHECK(wire::is_uuid(created.provider_id));
  CHECK(created.name == "garm-life01");
  CHECK(created.os_name == "debian");
  CHECK(created.os_version == "12");
  CHECK(created.os_type == wire::OsType::linux);
  CHECK(created.os_arch == wire::OsArch::amd64);
  CHECK(created.addresses.size() == 1);  // the test driver's made-up DHCP lease
  CHECK(created.addresses.at(0).type == wire::AddressType::private_address);

  const auto domain_name = agent::domain_name_for(kController, "garm-life01");
  const auto domain = host.hypervisor.find_by_name(domain_name);
  REQUIRE(domain);
  CHECK(domain->uuid == created.provider_id);
  CHECK(domain->tags.get("controller-id") == std::optional<std::string_view>(kController));
  CHECK(domain->tags.get("pool-id") == std::optional<std::string_view>(kPool));
  CHECK(domain->tags.get("agent-id") == std::optional<std::string_view>(kAgentId));
  CHECK(host.hypervisor.disk_paths(created.provider_id) ==
        std::vector<std::string>{"/edge-pool/" + agent::volume_name_for(domain_name)});
  CHECK(host.hypervisor.find_volume("edge-pool", agent::volume_name_for(domain_name)));
  CHECK(host.store.get(domain_name)->intent == agent::Intent::created);

  CHECK(service->get(kControllerId, instance_ref(created.provider_id)) == created);
  CHECK(service->get(kControllerId, instance_ref("garm-life01")) == created);
  CHECK(service->list(kControllerId, pool_id(kPool)) == listed({created}));
  CHECK(service->list(kControllerId, pool_id(kOtherPool)).empty());

  service->stop(kControllerId, instance_ref("garm-life01"), false);
  CHECK(service->get(kControllerId, instance_ref("garm-life01"))->status ==
        wire::InstanceStatus::stopped);
  service->start(kControllerId, instance_ref(created.provider_id));
  CHECK(service->get(kControllerId, instance_ref("garm-life01"))->status ==
        wire::InstanceStatus::running);
  service->stop(kControllerId, instance_ref(created.provider_id), true);
  CHECK(service->list(kControllerId, pool_id(kPool)).at(0).status == wire::InstanceStatus::stopped);

  CHECK(service->remove(kControllerId, instance_ref(created.provider_id)));
  CHECK_FALSE(service->get(kControllerId, instance_ref(created.provider_id)));
  CHECK(service->list(kControllerId, pool_id(kPool)).empty());
  CHECK(host.holds_nothing_of(kController, "garm-life01"));
  CHECK_FALSE(service->remove(kControllerId, instance_ref(created.provider_id)));
  CHECK_FALSE(service->remove(kControllerId, instance_ref("garm-life01")));
}

TEST_CASE("create is idempotent by instance name", "[lifecycle]") {
  Host host("lifecycle.xml");
  auto service = host.service();
  const auto first = service->create(kControllerId, bootstrap_for("garm-idem01"));
  const auto second = service->create(kControllerId, bootstrap_for("garm-idem01"));
  CHECK(second.provider_id == first.provider_id);
  CHECK(host.tagged_domain_count() == 1);

  SECTION("a stopped instance is started again and returned running") {
    service->stop(kControllerId, instance_ref("garm-idem01"), true);
    const auto third = service->create(kControllerId, bootstrap_for("garm-idem01"));
    CHECK(third.provider_id == first.provider_id);
    CHECK(third.status == wire::InstanceStatus::running);
    CHECK(host.tagged_domain_count() == 1);
  }
  SECTION("after a delete the same name is created afresh") {
    CHECK(service->remove(kControllerId, instance_ref("garm-idem01")));
    const auto again = service->create(kControllerId, bootstrap_for("garm-idem01"));
    CHECK(again.provider_id != first.provider_id);
    CHECK(host.tagged_domain_count() == 1);
  }
}

TEST_CASE("re-creating an instance that is paused or crashed replaces it with a running one",
          "[lifecycle]") {
  const auto broken_state =
      GENERATE(hypervisor::PowerState::paused, hypervisor::PowerState::crashed);
  Host host("lifecycle.xml");
  CrashSwitch never;
  FaultyHypervisor hypervisor(host.hypervisor, never);
  auto service = host.service(hypervisor, host.store);
  const auto first = service->create(kControllerId, bootstrap_for("garm-stuck01"));
  hypervisor.rewrite_found = [&](hypervisor::Domain& domain) {
    if (domain.uuid == first.provider_id) {
      domain.state = broken_state;  // e.g. QEMU paused the guest when the disk filled up
    }
  };
  const auto second = service->create(kControllerId, bootstrap_for("garm-stuck01"));
  CHECK(second.status == wire::InstanceStatus::running);
  CHECK(second.provider_id != first.provider_id);
  CHECK_FALSE(host.hypervisor.find_by_uuid(first.provider_id));
  CHECK(host.tagged_domain_count() == 1);
}

TEST_CASE("two controllers may use the same instance name without meeting", "[lifecycle]") {
  Host host("lifecycle.xml");
  auto service = host.service();
  const auto mine = service->create(kControllerId, bootstrap_for("garm-same01"));
  const auto theirs = service->create(kOtherControllerId, bootstrap_for("garm-same01"));
  CHECK(mine.provider_id != theirs.provider_id);
  CHECK_FALSE(service->get(kControllerId, instance_ref(theirs.provider_id)));
  CHECK_FALSE(service->remove(kControllerId, instance_ref(theirs.provider_id)));
  CHECK(service->remove(kControllerId, instance_ref("garm-same01")));
  CHECK(service->get(kOtherControllerId, instance_ref("garm-same01")) == theirs);
}

TEST_CASE("a dry run renders the domain and creates nothing", "[lifecycle]") {
  Host host("lifecycle.xml");
  auto service = host.service();
  const auto dry = service->dry_run_create(kControllerId, bootstrap_for("garm-dry01"));
  CHECK_FALSE(dry.already_exists);
  CHECK_THAT(dry.domain_xml,
             Catch::Contains("<garm-edge:instance-name>garm-dry01</garm-edge:instance-name>"));
  CHECK_THAT(dry.domain_xml,
             Catch::Contains("/edge-pool/" + agent::volume_name_for(dry.domain_name)));
  CHECK_THAT(dry.volume_xml, Catch::Contains("<path>/edge-pool/debian-12.qcow2</path>"));
  CHECK(dry.instance.status == wire::InstanceStatus::running);
  CHECK(host.tagged_domain_count() == 0);
  CHECK(host.holds_nothing_of(kController, "garm-dry01"));
}

TEST_CASE("requests the agent cannot serve are refused before anything is made", "[lifecycle]") {
  Host host("lifecycle.xml", [](agent::AgentConfig& config) {
    config.images.push_back(debian_image("missing-base", "not-there.qcow2"));
  });
  auto service = host.service();
  auto unknown_image = bootstrap_for("garm-bad01");
  unknown_image.image = "windows-11";
  CHECK_THROWS_MATCHES(service->create(kControllerId, unknown_image), ServiceError,
                       has_code(ServiceError::Code::invalid_argument));
  CHECK_THROWS_WITH(service->create(kControllerId, unknown_image),
                    Catch::Contains("unknown image \"windows-11\"; this agent offers: debian-12"));
  auto unknown_flavor = bootstrap_for("garm-bad01");
  unknown_flavor.flavor = "huge";
  CHECK_THROWS_WITH(service->create(kControllerId, unknown_flavor),
                    Catch::Contains("unknown flavor \"huge\""));
  auto wrong_arch = bootstrap_for("garm-bad01");
  wrong_arch.image = "ubuntu-arm";
  CHECK_THROWS_WITH(service->create(kControllerId, wrong_arch),
                    Catch::Contains("is arm64 but the pool asks for amd64"));
  auto missing_base = bootstrap_for("garm-bad01");
  missing_base.image = "missing-base";
  CHECK_THROWS_WITH(
      service->create(kControllerId, missing_base),
      Catch::Contains("base volume \"not-there.qcow2\" is not in storage pool \"edge-pool\""));
  CHECK_THROWS_AS(agent::ControllerId::parse("not-a-uuid"), wire::WireError);  // never reaches it
  CHECK(host.tagged_domain_count() == 0);
  CHECK(host.holds_nothing_of(kController, "garm-bad01"));
}

TEST_CASE("arm64 images become aarch64 guests", "[lifecycle]") {
  Host host("lifecycle.xml");
  auto service = host.service();
  auto arm = bootstrap_for("garm-arm01");
  arm.image = "ubuntu-arm";
  arm.arch = wire::OsArch::arm64;
  const auto dry = service->dry_run_create(kControllerId, arm);
  CHECK_THAT(dry.domain_xml,
             Catch::Contains("arch=\"aarch64\"") && Catch::Contains("firmware=\"efi\""));
  const auto created = service->create(kControllerId, arm);
  CHECK(created.os_arch == wire::OsArch::arm64);
  CHECK(service->remove(kControllerId, instance_ref(created.provider_id)));
  CHECK(host.holds_nothing_of(kController, "garm-arm01"));
}

TEST_CASE("start and stop of an unknown instance are not-found errors", "[lifecycle]") {
  Host host("lifecycle.xml");
  auto service = host.service();
  CHECK_THROWS_MATCHES(service->start(kControllerId, instance_ref("garm-nothere")), ServiceError,
                       has_code(ServiceError::Code::not_found));
  CHECK_THROWS_MATCHES(
      service->stop(kControllerId, instance_ref("0b6f5b8e-3a52-4c8e-9c1f-2a3b4c5d6e7f"), true),
      ServiceError, has_code(ServiceError::Code::not_found));
  CHECK_FALSE(service->get(kControllerId, instance_ref("garm-nothere")));
}

TEST_CASE("remove-all deletes every instance of one controller and nothing else", "[lifecycle]") {
  Host host("lifecycle.xml");
  auto service = host.service();
  service->create(kControllerId, bootstrap_for("garm-all01"));
  service->create(kControllerId, bootstrap_for("garm-all02", kOtherPool));
  const auto survivor = service->create(kOtherControllerId, bootstrap_for("garm-all03"));
  CHECK(service->remove_all(kControllerId) == 2);
  CHECK(host.holds_nothing_of(kController, "garm-all01"));
  CHECK(host.holds_nothing_of(kController, "garm-all02"));
  CHECK(service->list(kOtherControllerId, pool_id(kPool)) == listed({survivor}));
  CHECK(service->remove_all(kControllerId) == 0);
}

TEST_CASE("instance tokens and other secrets never reach the logs", "[lifecycle]") {
  Host host("lifecycle.xml");
  auto service = host.service();
  service->create(kControllerId, bootstrap_for("garm-log01"));
  service->remove(kControllerId, instance_ref("garm-log01"));
  const auto lines = host.log.lines();
  CHECK_FALSE(lines.empty());
  for (const auto& line : lines) {
    CHECK_THAT(line, !Catch::Contains("secret-token"));
  }
}

TEST_CASE("a delete by an old provider ID never removes a newer instance of the same name",
          "[lifecycle]") {
  Host host("lifecycle.xml");
  auto service = host.service();
  const auto old_one = service->create(kControllerId, bootstrap_for("garm-reborn"));
  CHECK(service->remove(kControllerId, instance_ref("garm-reborn")));
  const auto new_one = service->create(kControllerId, bootstrap_for("garm-reborn"));
  CHECK_FALSE(service->remove(kControllerId, instance_ref(old_one.provider_id)));
  CHECK_THROWS_AS(service->stop(kControllerId, instance_ref(old_one.provider_id), true),
                  ServiceError);
  CHECK(service->get(kControllerId, instance_ref(new_one.provider_id))->status ==
        wire::InstanceStatus::running);
  CHECK_FALSE(service->get(kControllerId, instance_ref(old_one.provider_id)));
}
