// The agent declares and enforces its host's capacity (libvirt's CPUs and memory, overcommit,
// reserve, max_instances), counts every instance and every create under way, and refuses what
// does not fit with no_capacity; a draining agent refuses creates and serves everything else.
#include <atomic>
#include <future>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "support/service_error_matcher.hpp"
#include "support/test_support.hpp"

using namespace garm_edge;
using namespace garm_edge::testing;
using agent::ServiceError;

namespace {

/// The lifecycle fixture's host has 8 CPUs and 32 GiB; "small" takes 2 vCPUs and 2 GiB.
Host host_with(const agent::CapacityConfig& capacity, bool draining = false) {
  return Host("lifecycle.xml", [&](agent::AgentConfig& config) {
    config.capacity = capacity;
    config.draining = draining;
  });
}

/// Room for every test's instances, for tests about something else than the limits.
constexpr agent::CapacityConfig kRoomy{
    .cpu_overcommit = 100, .memory_overcommit = 100, .reserved_memory_mib = 0, .max_instances = 0};

std::string name_of(int i) {
  return "garm-cap" + std::to_string(100 + i);
}

}  // namespace

TEST_CASE("creates beyond the host's vCPUs times overcommit are refused with no_capacity",
          "[capacity]") {
  auto host = host_with({.cpu_overcommit = 1.0,
                         .memory_overcommit = 1.0,
                         .reserved_memory_mib = 1024,
                         .max_instances = 0});
  auto service = host.service();
  auto report = service->capacity();
  CHECK(report.host.cpus == 8);
  CHECK(report.host.memory_mib == 32768);
  CHECK(report.host.machine == "x86_64");
  CHECK(report.limit == agent::Resources{.vcpus = 8, .memory_mib = 31744, .instances = 0});
  for (int i = 0; i < 4; ++i) {
    service->create(kControllerId, bootstrap_for(name_of(i)));
  }
  CHECK_THROWS_MATCHES(service->create(kControllerId, bootstrap_for(name_of(4))), ServiceError,
                       has_code(ServiceError::Code::no_capacity));
  CHECK(host.holds_nothing_of(kController, name_of(4)));
  CHECK_THAT(host.log.lines().back(), Catch::Contains("8 of 8 vCPUs"));
  // garm's retry of a create that finished is not a new instance: it is answered, full or not.
  CHECK(service->create(kControllerId, bootstrap_for(name_of(3))).name == name_of(3));
  // Every controller's instances take room on the host.
  report = service->capacity();
  CHECK(report.used ==
        agent::Resources{.vcpus = 8, .memory_mib = 8192, .instances = 4, .disk_gib = 80});
  CHECK(agent::free_of(report.used, report.limit).vcpus == 0);
  CHECK(report.by_state.at("running") == 4);

  CHECK_THROWS_MATCHES(service->create(kOtherControllerId, bootstrap_for(name_of(5))), ServiceError,
                       has_code(ServiceError::Code::no_capacity));
  service->remove(kControllerId, instance_ref(name_of(0)));
  CHECK(service->create(kOtherControllerId, bootstrap_for(name_of(5))).name == name_of(5));
}

TEST_CASE("memory after the reserve, and max_instances, bound the host too", "[capacity]") {
  SECTION("memory") {
    auto host = host_with({.cpu_overcommit = 100,
                           .memory_overcommit = 1.0,
                           .reserved_memory_mib = 32768 - 5000,
                           .max_instances = 0});
    auto service = host.service();
    service->create(kControllerId, bootstrap_for(name_of(0)));
    service->create(kControllerId, bootstrap_for(name_of(1)));
    CHECK_THROWS_MATCHES(service->create(kControllerId, bootstrap_for(name_of(2))), ServiceError,
                         has_code(ServiceError::Code::no_capacity));
  }
  SECTION("max_instances") {
    auto host = host_with({.cpu_overcommit = 100,
                           .memory_overcommit = 100,
                           .reserved_memory_mib = 0,
                           .max_instances = 1});
    auto service = host.service();
    service->create(kControllerId, bootstrap_for(name_of(0)));
    CHECK_THROWS_MATCHES(service->create(kControllerId, bootstrap_for(name_of(1))), ServiceError,
                         has_code(ServiceError::Code::no_capacity));
    CHECK(service->capacity().limit.instances == 1);
  }
}

TEST_CASE("parallel creates never take more than the host's last slots", "[capacity]") {
  auto host = host_with({.cpu_overcommit = 1.0,
                         .memory_overcommit = 100,
                         .reserved_memory_mib = 0,
                         .max_instances = 0});
  auto service = host.service();
  std::atomic<int> created{0};
  std::atomic<int> refused{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 16; ++i) {
    threads.emplace_back([&, i] {
      try {
        service->create(kControllerId, bootstrap_for(name_of(i)));
        ++created;
      } catch (const ServiceError& e) {
        if (e.code() == ServiceError::Code::no_capacity) {
          ++refused;
        }
      }
    });
  }
  for (auto& thread : threads) {
    thread.join();
  }
  CHECK(created == 4);
  CHECK(refused == 12);
  CHECK(host.tagged_domain_count() == 4);
  CHECK(service->capacity().used.vcpus == 8);  // no hold left over
}

TEST_CASE("a draining agent refuses creates, serves the rest, and stays draining after a restart",
          "[capacity]") {
  auto host = host_with(kRoomy);
  auto service = host.service();
  service->create(kControllerId, bootstrap_for(name_of(0)));
  service->set_draining(true);
  CHECK(service->capacity().draining);
  CHECK_THROWS_MATCHES(service->create(kControllerId, bootstrap_for(name_of(1))), ServiceError,
                       has_code(ServiceError::Code::draining));
  CHECK(host.holds_nothing_of(kController, name_of(1)));
  CHECK(service->create(kControllerId, bootstrap_for(name_of(0))).name == name_of(0));
  CHECK(service->get(kControllerId, instance_ref(name_of(0))));
  CHECK(service->list(kControllerId, pool_id(kPool)).size() == 1);

  auto restarted = host.service();
  CHECK(restarted->draining());
  CHECK(restarted->remove(kControllerId, instance_ref(name_of(0))));
  restarted->set_draining(false);
  CHECK(restarted->create(kControllerId, bootstrap_for(name_of(1))).name == name_of(1));
  CHECK_FALSE(host.service()->draining());
}

TEST_CASE("draining = true in agent.toml cannot be switched off at runtime", "[capacity]") {
  auto host = host_with({}, true);
  auto service = host.service();
  CHECK_THROWS_MATCHES(service->set_draining(false), ServiceError,
                       has_code(ServiceError::Code::conflict));
  CHECK(service->draining());
  CHECK_THROWS_MATCHES(service->create(kControllerId, bootstrap_for(name_of(0))), ServiceError,
                       has_code(ServiceError::Code::draining));
}

TEST_CASE(
    "a create under way is counted once, before and after its domain exists, and is "
    "known by name",
    "[capacity]") {
  auto host = host_with({.cpu_overcommit = 1.0,
                         .memory_overcommit = 100,
                         .reserved_memory_mib = 0,
                         .max_instances = 0});
  CrashSwitch crash;
  FaultyHypervisor hypervisor(host.hypervisor, crash);
  auto service = host.service(hypervisor, host.store);
  // The create stops twice: before its domain is defined, and once it is (before it starts).
  std::promise<void> at_define;
  std::promise<void> at_start;
  std::promise<void> go_on_define;
  std::promise<void> go_on_start;
  auto define_may_go = go_on_define.get_future().share();
  auto start_may_go = go_on_start.get_future().share();
  hypervisor.before = [&](const std::string& operation) {
    if (operation == "define") {
      at_define.set_value();
      define_may_go.wait();
    } else if (operation == "start") {
      at_start.set_value();
      start_may_go.wait();
    }
  };
  std::thread create([&] { service->create(kControllerId, bootstrap_for(name_of(0))); });
  at_define.get_future().wait();
  CHECK(service->create_under_way(kControllerId, name_of(0)));
  CHECK_FALSE(service->create_under_way(kControllerId, name_of(1)));
  CHECK(service->capacity().used.instances == 1);
  go_on_define.set_value();
  at_start.get_future().wait();
  // Defined and still under way: one instance, not its domain and its hold.
  CHECK(service->capacity().used ==
        agent::Resources{.vcpus = 2, .memory_mib = 2048, .instances = 1, .disk_gib = 20});
  go_on_start.set_value();
  create.join();
  hypervisor.before = nullptr;
  CHECK_FALSE(service->create_under_way(kControllerId, name_of(0)));
  CHECK(service->capacity().used.instances == 1);
  // 8 vCPUs: three more small instances fit, exactly, with the first counted once.
  for (int i = 1; i < 4; ++i) {
    service->create(kControllerId, bootstrap_for(name_of(i)));
  }
  CHECK_THROWS_MATCHES(service->create(kControllerId, bootstrap_for(name_of(4))), ServiceError,
                       has_code(ServiceError::Code::no_capacity));
}

namespace {

/// kRoomy, with at most 8 instances, and the given shares.
Host host_with_shares(const agent::SharesConfig& shares) {
  return Host("lifecycle.xml", [&](agent::AgentConfig& config) {
    config.capacity = kRoomy;
    config.capacity.max_instances = 8;
    config.shares = shares;
  });
}

std::string refusal_of(agent::InstanceService& service, const agent::ControllerId& controller,
                       const std::string& name, const std::string& priority = "") {
  auto bootstrap = bootstrap_for(name);
  if (!priority.empty()) {
    bootstrap.extra_specs = nlohmann::json{{"priority", priority}};
  }
  try {
    service.create(controller, bootstrap);
    return "(created)";
  } catch (const ServiceError& e) {
    CHECK(e.code() == ServiceError::Code::no_capacity);  // the provider tries the next agent
    return e.what();
  }
}

}  // namespace

TEST_CASE("shares: a controller at its quota is refused with nothing made, another goes on",
          "[capacity][shares]") {
  agent::SharesConfig shares;
  shares.quotas.push_back({.controller = kController, .max = {.instances = 3}, .reserved = {}});
  auto host = host_with_shares(shares);
  auto service = host.service();
  for (int i = 0; i < 3; ++i) {
    service->create(kControllerId, bootstrap_for(name_of(i)));
  }
  CHECK_THAT(refusal_of(*service, kControllerId, name_of(3)),
             Catch::Contains("is at its quota") && Catch::Contains("holds 3 instances"));
  CHECK(host.holds_nothing_of(kController, name_of(3)));
  CHECK(service->refusals().of(agent::RefusalReason::quota) == 1);
  // garm's retry of a create that finished is answered, at the quota or not.
  CHECK(service->create(kControllerId, bootstrap_for(name_of(2))).name == name_of(2));
  for (int i = 4; i < 8; ++i) {
    CHECK(service->create(kOtherControllerId, bootstrap_for(name_of(i))).name == name_of(i));
  }
  const auto report = service->capacity();
  CHECK(report.usage.of(kController).instances == 3);
  CHECK(report.usage.of(kOtherController).instances == 4);
  // A delete gives the slot back to its controller.
  service->remove(kControllerId, instance_ref(name_of(0)));
  CHECK(service->create(kControllerId, bootstrap_for(name_of(3))).name == name_of(3));
}

TEST_CASE("shares: a reservation keeps the last slots for its controller", "[capacity][shares]") {
  agent::SharesConfig shares;
  shares.quotas.push_back(
      {.controller = kOtherController, .max = {}, .reserved = {.instances = 2}});
  auto host = host_with_shares(shares);
  auto service = host.service();
  for (int i = 0; i < 6; ++i) {
    service->create(kControllerId, bootstrap_for(name_of(i)));
  }
  CHECK_THAT(refusal_of(*service, kControllerId, name_of(6)),
             Catch::Contains("keeps the rest for other controllers' reservations"));
  CHECK(host.holds_nothing_of(kController, name_of(6)));
  CHECK(service->create(kOtherControllerId, bootstrap_for(name_of(6))).name == name_of(6));
  CHECK(service->create(kOtherControllerId, bootstrap_for(name_of(7))).name == name_of(7));
  CHECK(service->refusals().of(agent::RefusalReason::reserved) == 1);
  // The share each is told of: A has no room left, B none either (the host is full).
  const auto report = service->capacity();
  const agent::HostShares view(shares, report.usage, report.limit, std::nullopt);
  CHECK(view.share_of(kController).room.at(wire::Priority::normal).instances == 0);
}

TEST_CASE("shares: low-priority pools leave the headroom to higher ones, capped per controller",
          "[capacity][shares]") {
  agent::SharesConfig shares;
  shares.headroom.low = {.instances = 2};
  shares.quotas.push_back({.controller = kOtherController,
                           .max = {},
                           .reserved = {},
                           .max_priority = wire::Priority::normal});
  auto host = host_with_shares(shares);
  auto service = host.service();
  for (int i = 0; i < 6; ++i) {
    CHECK(refusal_of(*service, kControllerId, name_of(i), "low") == "(created)");
  }
  CHECK_THAT(refusal_of(*service, kControllerId, name_of(6), "low"),
             Catch::Contains("free for higher-priority pools") && Catch::Contains("is low"));
  CHECK(refusal_of(*service, kOtherControllerId, name_of(6), "high") == "(created)");
  CHECK(refusal_of(*service, kControllerId, name_of(7)) == "(created)");  // normal by default
  CHECK(service->refusals().of(agent::RefusalReason::priority) == 1);
  // A priority that is not one is refused as garm's input, before anything.
  CHECK_THROWS_MATCHES(service->create(kControllerId,
                                       [] {
                                         auto b = bootstrap_for("garm-cap200");
                                         b.extra_specs = nlohmann::json{{"priority", "urgent"}};
                                         return b;
                                       }()),
                       ServiceError, has_code(ServiceError::Code::invalid_argument));
}
