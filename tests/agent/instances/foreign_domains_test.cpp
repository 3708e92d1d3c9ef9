#include <catch2/catch.hpp>

#include "support/test_support.hpp"

using namespace garm_edge;
using namespace garm_edge::testing;

// foreign.xml holds three domains this agent did not create: one without any metadata, one
// tagged by another agent for our controller and pool, and one squatting on the domain name
// our instance "garm-squatted" would get.
namespace {

constexpr const char* kPlainUuid = "11111111-2222-4333-8444-555555555555";
constexpr const char* kOtherAgentUuid = "22222222-3333-4444-8555-666666666666";
constexpr const char* kSquatterUuid = "33333333-4444-4555-8666-777777777777";

void check_foreign_domains_intact(Host& host) {
  const auto plain = host.hypervisor.find_by_uuid(kPlainUuid);
  REQUIRE(plain);
  CHECK(plain->state == hypervisor::PowerState::running);
  const auto other = host.hypervisor.find_by_uuid(kOtherAgentUuid);
  REQUIRE(other);
  CHECK(other->state == hypervisor::PowerState::running);
  CHECK(host.hypervisor.find_by_uuid(kSquatterUuid));
}

}  // namespace

TEST_CASE("foreign domains are invisible to list and get", "[foreign]") {
  Host host("foreign.xml");
  auto service = host.service();
  const auto mine = service->create(kControllerId, bootstrap_for("garm-mine01"));
  CHECK(service->list(kControllerId, pool_id(kPool)) == listed({mine}));
  CHECK_FALSE(service->get(kControllerId, instance_ref(kPlainUuid)));
  CHECK_FALSE(service->get(kControllerId, instance_ref(kOtherAgentUuid)));
  CHECK_FALSE(service->get(kControllerId, instance_ref("garm-other")));
  CHECK_FALSE(service->get(kControllerId, instance_ref("foreign-plain")));
}

TEST_CASE("delete, start, stop and remove-all never touch foreign domains", "[foreign]") {
  Host host("foreign.xml");
  auto service = host.service();
  service->create(kOtherControllerId, bootstrap_for("garm-theirs1"));
  const auto theirs = service->get(kOtherControllerId, instance_ref("garm-theirs1"));
  REQUIRE(theirs);

  CHECK_FALSE(service->remove(kControllerId, instance_ref(kPlainUuid)));
  CHECK_FALSE(service->remove(kControllerId, instance_ref(kOtherAgentUuid)));
  CHECK_FALSE(service->remove(kControllerId, instance_ref("garm-other")));
  CHECK_FALSE(service->remove(kControllerId, instance_ref(theirs->provider_id)));
  CHECK_THROWS_AS(service->stop(kControllerId, instance_ref(kPlainUuid), true),
                  agent::ServiceError);
  CHECK_THROWS_AS(service->stop(kControllerId, instance_ref(theirs->provider_id), true),
                  agent::ServiceError);
  CHECK(service->remove_all(kControllerId) == 0);
  check_foreign_domains_intact(host);
  CHECK(service->get(kOtherControllerId, instance_ref("garm-theirs1"))->status ==
        wire::InstanceStatus::running);
}

TEST_CASE("a foreign domain squatting on an instance's domain name is a conflict, left alone",
          "[foreign]") {
  Host host("foreign.xml");
  auto service = host.service();
  CHECK_THROWS_WITH(service->create(kControllerId, bootstrap_for("garm-squatted")),
                    Catch::Contains("exists and is not this agent's instance"));
  CHECK_FALSE(service->remove(kControllerId, instance_ref("garm-squatted")));
  check_foreign_domains_intact(host);
}

TEST_CASE("reconcile never touches a domain without this agent's tag", "[foreign]") {
  Host host("foreign.xml");
  auto service = host.service();
  const auto report = service->reconcile();
  CHECK(report.orphan_domains == 0);
  CHECK(report.failures == 0);
  check_foreign_domains_intact(host);
}
