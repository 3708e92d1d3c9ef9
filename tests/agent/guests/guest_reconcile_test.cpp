// Reservations follow instances through failures, crashes and restarts.

#include <catch2/catch.hpp>

#include "agent/guests/guest_access.hpp"
#include "agent/guests/guest_attachments.hpp"
#include "agent/guests/guest_index.hpp"
#include "agent/instances/identifiers.hpp"
#include "support/test_support.hpp"

using namespace garm_edge;
using namespace garm_edge::testing;

namespace {

void enable_guests(agent::AgentConfig& config) {
  config.guests.enabled = true;
  config.guests.address = "127.0.0.1";
  config.guests.port = 8775;
  config.guests.addresses = "192.168.150.10-192.168.150.20";
  config.guests.anti_spoofing = agent::AntiSpoofing::off;  // the test driver has no nwfilters
}

/// One agent process with guest access over `hypervisor` and `store`.
struct GuestAgent {
  GuestAgent(Host& host, hypervisor::Hypervisor& hypervisor, agent::InstanceStore& store)
      : access(host.config, hypervisor, host.log), service(host.service(hypervisor, store)) {
    access.start();
    service->serve_guests(attachments);
  }
  agent::GuestIndex index;
  agent::GuestAccess access;
  agent::GuestAttachments attachments{access, index, nullptr};
  std::unique_ptr<agent::InstanceService> service;
};

std::vector<std::string> reserved(Host& host) {
  std::vector<std::string> addresses;
  for (const auto& entry : host.hypervisor.network("edge-net").hosts) {
    addresses.push_back(entry.ip);
  }
  return addresses;
}

}  // namespace

TEST_CASE("libvirt refuses a second reservation of one address, removal is idempotent",
          "[guests][hypervisor]") {
  Host host("reconcile.xml");
  const hypervisor::DhcpHost first{.mac = "52:54:00:00:00:01", .ip = "192.168.150.10"};
  host.hypervisor.add_dhcp_host("edge-net", first);
  try {
    host.hypervisor.add_dhcp_host("edge-net", {.mac = "52:54:00:00:00:02", .ip = first.ip});
    FAIL("a second reservation of one address was accepted");
  } catch (const hypervisor::HypervisorError& e) {
    CHECK(e.kind() == hypervisor::HypervisorError::Kind::already_exists);
  }
  CHECK(reserved(host) == std::vector<std::string>{first.ip});
  CHECK(host.hypervisor.remove_dhcp_host("edge-net", first));
  CHECK_FALSE(host.hypervisor.remove_dhcp_host("edge-net", first));
  CHECK(reserved(host).empty());
}

TEST_CASE("a failed create leaves no reservation behind", "[guests]") {
  Host host("create_failure.xml", enable_guests);
  CrashSwitch never;
  FaultyHypervisor hypervisor(host.hypervisor, never);
  GuestAgent agent(host, hypervisor, host.store);
  hypervisor.fail_on("start");
  CHECK_THROWS_AS(agent.service->create(kControllerId, bootstrap_for("garm-fail01")),
                  agent::ServiceError);
  CHECK(reserved(host).empty());
  CHECK(agent.index.addresses().empty());
  CHECK(host.holds_nothing_of(kController, "garm-fail01"));
}

TEST_CASE("after kill -9 between reserving and defining, reconcile releases the address",
          "[guests]") {
  Host host("reconcile.xml", enable_guests);
  {
    CrashSwitch crash;
    FaultyHypervisor hypervisor(host.hypervisor, crash);
    GuestAgent doomed(host, hypervisor, host.store);
    hypervisor.crash_after("add_dhcp_host");
    CHECK_THROWS(doomed.service->create(kControllerId, bootstrap_for("garm-crash01")));
    REQUIRE(crash.dead);
  }
  CHECK(reserved(host) == std::vector<std::string>{"192.168.150.10"});
  GuestAgent restarted(host, host.hypervisor, host.store);
  const auto report = restarted.service->reconcile();
  CHECK(report.rolled_back_creates == 1);
  CHECK(reserved(host).empty());
  CHECK(host.holds_nothing_of(kController, "garm-crash01"));
  // garm's retry: the same name again gets an instance and an address.
  const auto again = restarted.service->create(kControllerId, bootstrap_for("garm-crash01"));
  REQUIRE(again.addresses.size() == 1);
  CHECK(reserved(host) == std::vector<std::string>{again.addresses[0].address});
}

TEST_CASE("reconcile releases reservations in the agent's range that no instance holds",
          "[guests]") {
  Host host("reconcile.xml", enable_guests);
  GuestAgent agent(host, host.hypervisor, host.store);
  const auto kept = agent.service->create(kControllerId, bootstrap_for("garm-keep01"));
  host.hypervisor.add_dhcp_host("edge-net", {.mac = "52:54:00:00:00:99", .ip = "192.168.150.19"});
  // Outside the agent's range: the operator's, never touched.
  host.hypervisor.add_dhcp_host("edge-net", {.mac = "52:54:00:00:00:98", .ip = "192.168.150.50"});
  const auto report = agent.service->reconcile();
  CHECK(report.orphan_reservations == 1);
  CHECK(reserved(host) == std::vector<std::string>{kept.addresses.at(0).address, "192.168.150.50"});
}

TEST_CASE("a restarted agent knows its guests' addresses from the records", "[guests]") {
  Host host("reconcile.xml", enable_guests);
  std::string address;
  {
    GuestAgent first(host, host.hypervisor, host.store);
    address = first.service->create(kControllerId, bootstrap_for("garm-restart1"))
                  .addresses.at(0)
                  .address;
  }
  GuestAgent second(host, host.hypervisor, host.store);
  CHECK(second.index.addresses() == std::set<std::string>{address});
  const auto got = second.service->get(kControllerId, instance_ref("garm-restart1"));
  REQUIRE(got);
  CHECK(got->addresses.at(0).address == address);
  // The next guest gets another address.
  const auto next = second.service->create(kControllerId, bootstrap_for("garm-restart2"));
  CHECK(next.addresses.at(0).address != address);
  CHECK(second.service->reconcile().orphan_reservations == 0);
}
