#include <catch2/catch.hpp>

#include "support/test_support.hpp"

using namespace garm_edge;
using namespace garm_edge::testing;

namespace {

struct Step {
  const char* fault;     // the operation that fails
  bool in_store;         // fault injected into the store rather than the hypervisor
  const char* reported;  // the step the error message names
};

}  // namespace

TEST_CASE("a create whose call took effect but then failed removes everything it made",
          "[create][cleanup]") {
  const auto step = GENERATE(Step{"create_overlay", false, "create the overlay volume"},
                             Step{"define", false, "define the domain"},
                             Step{"start", false, "start the domain"});
  INFO("step that took effect, then failed: " << step.fault);
  Host host("create_failure.xml");
  CrashSwitch never;
  FaultyHypervisor hypervisor(host.hypervisor, never);
  hypervisor.fail_after(step.fault);
  auto service = host.service(hypervisor, host.store);
  CHECK_THROWS_WITH(
      service->create(kControllerId, bootstrap_for("garm-fail03")),
      Catch::Contains(std::string("failed to ") + step.reported) && Catch::Contains("took effect"));
  CHECK(host.holds_nothing_of(kController, "garm-fail03"));
  CHECK(host.tagged_domain_count() == 0);
}

TEST_CASE("a create that fails at any step removes everything it made", "[create][cleanup]") {
  const auto step =
      GENERATE(Step{"put:creating", true, "record the intent"},
               Step{"create_overlay", false, "create the overlay volume"},
               Step{"define", false, "define the domain"}, Step{"start", false, "start the domain"},
               Step{"find_by_uuid", false, "confirm the domain runs"},
               Step{"put:created", true, "record the result"});
  INFO("failing step: " << step.fault);
  Host host("create_failure.xml");
  CrashSwitch never;
  FaultyHypervisor hypervisor(host.hypervisor, never);
  FaultyStore store(host.store, never);
  (step.in_store ? store.fail_on(step.fault) : hypervisor.fail_on(step.fault));
  auto service = host.service(hypervisor, store);

  CHECK_THROWS_WITH(service->create(kControllerId, bootstrap_for("garm-fail01")),
                    Catch::Contains(std::string("failed to ") + step.reported) &&
                        Catch::Contains("injected failure"));
  CHECK(host.holds_nothing_of(kController, "garm-fail01"));
  CHECK(host.tagged_domain_count() == 0);
  CHECK(host.store.list().empty());

  // garm retries with the same name; with the fault gone it succeeds.
  hypervisor.fail_on("");
  store.fail_on("");
  const auto retried = service->create(kControllerId, bootstrap_for("garm-fail01"));
  CHECK(retried.status == wire::InstanceStatus::running);
  CHECK(host.tagged_domain_count() == 1);
}

TEST_CASE("when cleanup itself fails the error says so and reconcile finishes it",
          "[create][cleanup]") {
  Host host("create_failure.xml");
  CrashSwitch crash;
  FaultyHypervisor hypervisor(host.hypervisor, crash);
  FaultyStore store(host.store, crash);
  hypervisor.crash_after("define");  // the domain exists, then every call fails
  auto service = host.service(hypervisor, store);
  CHECK_THROWS_WITH(service->create(kControllerId, bootstrap_for("garm-fail02")),
                    Catch::Contains("failed to start the domain") &&
                        Catch::Contains("cleanup is incomplete") &&
                        Catch::Contains("reconcile loop will finish it"));
  CHECK_FALSE(host.holds_nothing_of(kController, "garm-fail02"));

  const auto report = host.service()->reconcile();
  CHECK(report.rolled_back_creates == 1);
  CHECK(host.holds_nothing_of(kController, "garm-fail02"));
}

TEST_CASE("a hypervisor that cannot list makes list fail, never return a partial list",
          "[create][list]") {
  Host host("create_failure.xml");
  CrashSwitch never;
  FaultyHypervisor hypervisor(host.hypervisor, never);
  auto service = host.service(hypervisor, host.store);
  service->create(kControllerId, bootstrap_for("garm-list01"));
  hypervisor.fail_on("list");
  CHECK_THROWS_AS(service->list(kControllerId, pool_id(kPool)), agent::ServiceError);
  CHECK_THROWS_AS(service->remove_all(kControllerId), agent::ServiceError);
}
