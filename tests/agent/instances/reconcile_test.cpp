#include <algorithm>
#include <fstream>
#include <functional>
#include <thread>

#include <catch2/catch.hpp>

#include "agent/instances/identifiers.hpp"
#include "agent/instances/reconcile_loop.hpp"
#include "support/test_support.hpp"

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
    service.create(kControllerId, bootstrap_for(name));
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
  restarted->create(kControllerId, bootstrap_for("garm-crash01"));
  CHECK(restarted->list(kControllerId, pool_id(kPool)).size() == 1);
}

TEST_CASE("a crash after the create finished keeps the instance, garm's delete removes it",
          "[reconcile]") {
  Host host("reconcile.xml");
  crash_during_create(host, {"put:created", true}, "garm-crash02");
  auto restarted = host.service();
  const auto report = restarted->reconcile();
  CHECK(report.rolled_back_creates == 0);
  CHECK(restarted->get(kControllerId, instance_ref("garm-crash02"))->status ==
        wire::InstanceStatus::running);
  CHECK(restarted->remove(kControllerId, instance_ref("garm-crash02")));
  CHECK(host.holds_nothing_of(kController, "garm-crash02"));
}

TEST_CASE("reconcile finishes a delete interrupted at any step", "[reconcile]") {
  const auto point = GENERATE(CrashPoint{"put:deleting", true}, CrashPoint{"destroy", false},
                              CrashPoint{"undefine", false}, CrashPoint{"delete_volume", false});
  INFO("killed after " << point.operation);
  Host host("reconcile.xml");
  host.service()->create(kControllerId, bootstrap_for("garm-crash03"));
  run_until_crash(host, point, [](agent::InstanceService& service) {
    service.remove(kControllerId, instance_ref("garm-crash03"));
  });

  const auto report = host.service()->reconcile();
  CHECK(report.finished_deletes == 1);
  CHECK(host.holds_nothing_of(kController, "garm-crash03"));
}

TEST_CASE("reconcile notices domains removed behind the agent's back", "[reconcile]") {
  Host host("reconcile.xml");
  auto service = host.service();
  const auto created = service->create(kControllerId, bootstrap_for("garm-gone01"));
  host.hypervisor.destroy(created.provider_id);
  host.hypervisor.undefine(created.provider_id);
  const auto report = service->reconcile();
  CHECK(report.vanished_domains == 1);
  CHECK(host.holds_nothing_of(kController, "garm-gone01"));
}

TEST_CASE("reconcile removes this agent's tagged domains that have no record", "[reconcile]") {
  Host host("reconcile.xml");
  auto service = host.service();
  service->create(kControllerId, bootstrap_for("garm-lost01"));
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
  const auto healthy = service->create(kControllerId, bootstrap_for("garm-ok01"));
  const auto report = service->reconcile();
  CHECK(report.rolled_back_creates + report.finished_deletes + report.vanished_domains +
            report.orphan_domains ==
        0);
  CHECK(service->get(kControllerId, instance_ref("garm-ok01")) == healthy);
}

TEST_CASE("the reconcile loop runs passes on its own", "[reconcile]") {
  Host host("reconcile.xml");
  auto service = host.service();
  const auto created = service->create(kControllerId, bootstrap_for("garm-loop01"));
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

TEST_CASE("reconcile removes overlay volumes no instance uses and nothing else", "[reconcile]") {
  Host host("reconcile.xml");
  auto service = host.service();
  const auto kept = service->create(kControllerId, bootstrap_for("garm-vol01"));
  const std::string stray =
      agent::volume_name_for(agent::domain_name_for(kController, "garm-late"));
  host.hypervisor.create_overlay({.pool = "edge-pool",
                                  .name = stray,
                                  .capacity_bytes = 1 << 30,
                                  .backing_path = "/edge-pool/debian-12.qcow2",
                                  .backing_format = "qcow2"});
  const auto report = service->reconcile();
  CHECK(report.orphan_volumes == 1);
  CHECK_FALSE(host.hypervisor.find_volume("edge-pool", stray));
  CHECK(host.hypervisor.find_volume("edge-pool", "debian-12.qcow2"));  // a base image: not ours
  CHECK(host.hypervisor.find_volume(
      "edge-pool", agent::volume_name_for(agent::domain_name_for(kController, "garm-vol01"))));
  CHECK(service->get(kControllerId, instance_ref(kept.provider_id)));
}

TEST_CASE("a wiped state directory does not make reconcile destroy running instances",
          "[reconcile]") {
  Host host("reconcile.xml");
  const auto created = host.service()->create(kControllerId, bootstrap_for("garm-wiped"));

  // The same agent restarted on an empty state directory (wiped, or not mounted).
  TempDir fresh;
  agent::FileInstanceStore empty_store(fresh.path());
  auto restarted = host.service(host.hypervisor, empty_store);
  const auto report = restarted->reconcile();
  CHECK(report.other_state == 1);
  CHECK(report.orphan_domains == 0);
  CHECK(host.hypervisor.find_by_uuid(created.provider_id)->state ==
        hypervisor::PowerState::running);
  // garm can still see and delete it.
  CHECK(restarted->get(kControllerId, instance_ref("garm-wiped")));
  CHECK(restarted->remove(kControllerId, instance_ref(created.provider_id)));
  CHECK_FALSE(host.hypervisor.find_by_uuid(created.provider_id));
}

TEST_CASE("an unreadable record keeps reconcile away from its instance", "[reconcile]") {
  Host host("reconcile.xml");
  auto service = host.service();
  const auto created = service->create(kControllerId, bootstrap_for("garm-torn01"));
  const auto domain_name = agent::domain_name_for(kController, "garm-torn01");
  std::ofstream(host.config.state_dir / "instances" / (domain_name + ".json")) << "{ torn";
  const auto report = service->reconcile();
  CHECK(report.failures >= 1);
  CHECK(report.orphan_domains == 0);
  CHECK(host.hypervisor.find_by_uuid(created.provider_id)->state ==
        hypervisor::PowerState::running);
  CHECK(host.hypervisor.find_volume("edge-pool", agent::volume_name_for(domain_name)));
  // The operator hears which file, and what the agent will not do because of it.
  const auto lines = host.log.lines();
  CHECK(std::any_of(lines.begin(), lines.end(), [&](const std::string& line) {
    return line.find(domain_name + ".json") != std::string::npos &&
           line.find("left alone") != std::string::npos;
  }));
  CHECK_THROWS_WITH(host.store.get(domain_name),
                    Catch::Contains(domain_name + ".json is unreadable"));
  // Everything else is served.
  const auto other = service->create(kControllerId, bootstrap_for("garm-whole01"));
  CHECK(service->get(kControllerId, instance_ref("garm-whole01"))->provider_id ==
        other.provider_id);
}
