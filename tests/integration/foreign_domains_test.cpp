#include <catch2/catch.hpp>

#include "integration/test_support.hpp"

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
  const auto mine = service->create(kController, bootstrap_for("garm-mine01"));
  CHECK(service->list(kController, kPool) == listed({mine}));
  CHECK_FALSE(service->get(kController, kPlainUuid));
  CHECK_FALSE(service->get(kController, kOtherAgentUuid));
  CHECK_FALSE(service->get(kController, "garm-other"));
  CHECK_FALSE(service->get(kController, "foreign-plain"));
}

TEST_CASE("delete, start, stop and remove-all never touch foreign domains", "[foreign]") {
  Host host("foreign.xml");
  auto service = host.service();
  service->create(kOtherController, bootstrap_for("garm-theirs1"));
  const auto theirs = service->get(kOtherController, "garm-theirs1");
  REQUIRE(theirs);

  CHECK_FALSE(service->remove(kController, kPlainUuid));
  CHECK_FALSE(service->remove(kController, kOtherAgentUuid));
  CHECK_FALSE(service->remove(kController, "garm-other"));
  CHECK_FALSE(service->remove(kController, theirs->provider_id));
  CHECK_THROWS_AS(service->stop(kController, kPlainUuid, true), agent::ServiceError);
  CHECK_THROWS_AS(service->stop(kController, theirs->provider_id, true), agent::ServiceError);
  CHECK(service->remove_all(kController) == 0);
  check_foreign_domains_intact(host);
  CHECK(service->get(kOtherController, "garm-theirs1")->status == wire::InstanceStatus::running);
}

TEST_CASE("a foreign domain squatting on an instance's domain name is a conflict, left alone",
          "[foreign]") {
  Host host("foreign.xml");
  auto service = host.service();
  CHECK_THROWS_WITH(service->create(kController, bootstrap_for("garm-squatted")),
                    Catch::Contains("exists and is not this agent's instance"));
  CHECK_FALSE(service->remove(kController, "garm-squatted"));
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
