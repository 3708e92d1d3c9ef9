#include <functional>
#include <thread>

#include <catch2/catch.hpp>

#include "agent/identifiers.hpp"
#include "agent/reconcile_loop.hpp"
#include "integration/test_support.hpp"

using namespace garm_edge;
using namespace garm_edge::testing;

namespace {

struct CrashPoint {
  const char* operation;
  bool in_store;
};

/// Runs `action` in an "agent process" that dies right after `point`; a fresh service over the
/// same host then plays the agent restarted by systemd after kill -9.
void run_until_crash(Host& host, const CrashPoint& point,
                     const std::function<void(agent::InstanceService&)>& action) {
  CrashSwitch crash;
  FaultyHypervisor hypervisor(host.hypervisor, crash);
  FaultyStore store(host.store, crash);
  (point.in_store ? store.crash_after(point.operation) : hypervisor.crash_after(point.operation));
  auto doomed = host.service(hypervisor, store);
  try {
    action(*doomed);
  } catch (const agent::ServiceError&) {
    // the process died mid-operation; garm sees a failed command
  }
  REQUIRE(crash.dead);
}

void crash_during_create(Host& host, const CrashPoint& point, const std::string& name) {
  run_until_crash(host, point, [&](agent::InstanceService& service) {
    service.create(kController, bootstrap_for(name));
  });
}

}  // namespace

TEST_CASE("reconcile after a crash mid-create leaves nothing behind", "[reconcile]") {
  const auto point = GENERATE(CrashPoint{"put:creating", true}, CrashPoint{"create_overlay", false},
                              CrashPoint{"define", false}, CrashPoint{"start", false},
                              CrashPoint{"find_by_uuid", false});
  INFO("killed after " << point.operation);
  Host host("reconcile.xml");
  crash_during_create(host, point, "garm-crash01");
  CHECK_FALSE(host.holds_nothing_of(kController, "garm-crash01"));

  auto restarted = host.service();
  const auto report = restarted->reconcile();
  CHECK(report.rolled_back_creates == 1);
  CHECK(report.failures == 0);
  CHECK(host.holds_nothing_of(kController, "garm-crash01"));
  CHECK(host.tagged_domain_count() == 1);  // only other-agent-vm from the fixture

  // garm's next attempt with the same name works and makes exactly one instance.
  restarted->create(kController, bootstrap_for("garm-crash01"));
  CHECK(restarted->list(kController, kPool).size() == 1);
}

TEST_CASE("a crash after the create finished keeps the instance; garm's delete removes it",
          "[reconcile]") {
  Host host("reconcile.xml");
  crash_during_create(host, {"put:created", true}, "garm-crash02");
  auto restarted = host.service();
  const auto report = restarted->reconcile();
  CHECK(report.rolled_back_creates == 0);
  CHECK(restarted->get(kController, "garm-crash02")->status == wire::InstanceStatus::running);
  CHECK(restarted->remove(kController, "garm-crash02"));
  CHECK(host.holds_nothing_of(kController, "garm-crash02"));
}

TEST_CASE("reconcile finishes a delete interrupted at any step", "[reconcile]") {
  const auto point = GENERATE(CrashPoint{"put:deleting", true}, CrashPoint{"destroy", false},
                              CrashPoint{"undefine", false}, CrashPoint{"delete_volume", false});
  INFO("killed after " << point.operation);
  Host host("reconcile.xml");
  host.service()->create(kController, bootstrap_for("garm-crash03"));
  run_until_crash(host, point, [](agent::InstanceService& service) {
    service.remove(kController, "garm-crash03");
  });

  const auto report = host.service()->reconcile();
  CHECK(report.finished_deletes == 1);
  CHECK(host.holds_nothing_of(kController, "garm-crash03"));
}

TEST_CASE("reconcile notices domains removed behind the agent's back", "[reconcile]") {
  Host host("reconcile.xml");
  auto service = host.service();
  const auto created = service->create(kController, bootstrap_for("garm-gone01"));
  host.hypervisor.destroy(created.provider_id);
  host.hypervisor.undefine(created.provider_id);
  const auto report = service->reconcile();
  CHECK(report.vanished_domains == 1);
  CHECK(host.holds_nothing_of(kController, "garm-gone01"));
}

TEST_CASE("reconcile removes this agent's tagged domains that have no record", "[reconcile]") {
  Host host("reconcile.xml");
  auto service = host.service();
  service->create(kController, bootstrap_for("garm-lost01"));
  host.store.remove(agent::domain_name_for(kController, "garm-lost01"));  // state dir lost
  const auto report = service->reconcile();
  CHECK(report.orphan_domains == 1);
  CHECK(host.holds_nothing_of(kController, "garm-lost01"));
  CHECK(host.hypervisor.find_by_uuid("22222222-3333-4444-8555-666666666666"));  // other agent's
  CHECK(host.hypervisor.find_by_uuid("11111111-2222-4333-8444-555555555555"));  // untagged
}

TEST_CASE("reconcile leaves healthy instances and busy ones alone", "[reconcile]") {
  Host host("reconcile.xml");
  auto service = host.service();
  const auto healthy = service->create(kController, bootstrap_for("garm-ok01"));
  const auto report = service->reconcile();
  CHECK(report.rolled_back_creates + report.finished_deletes + report.vanished_domains +
            report.orphan_domains ==
        0);
  CHECK(service->get(kController, "garm-ok01") == healthy);
}

TEST_CASE("the reconcile loop runs passes on its own", "[reconcile]") {
  Host host("reconcile.xml");
  auto service = host.service();
  const auto created = service->create(kController, bootstrap_for("garm-loop01"));
  host.hypervisor.destroy(created.provider_id);
  host.hypervisor.undefine(created.provider_id);
  {
    agent::ReconcileLoop loop(*service, std::chrono::milliseconds(10), host.log);
    for (int i = 0; i < 500 && loop.passes() < 2; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    CHECK(loop.passes() >= 2);
  }
  CHECK(host.holds_nothing_of(kController, "garm-loop01"));
}
