#include <set>
#include <thread>

#include <catch2/catch.hpp>

#include "support/test_support.hpp"

using namespace garm_edge;
using namespace garm_edge::testing;

namespace {

/// Runs `work(i)` on `count` threads at once and collects what each returned or threw.
template <class Work>
std::vector<std::string> run_concurrently(int count, Work work) {
  std::vector<std::string> results(static_cast<std::size_t>(count));
  std::vector<std::thread> threads;
  std::atomic<bool> go{false};
  for (int i = 0; i < count; ++i) {
    threads.emplace_back([&, i] {
      while (!go) {
        std::this_thread::yield();
      }
      try {
        results[static_cast<std::size_t>(i)] = work(i);
      } catch (const std::exception& e) {
        results[static_cast<std::size_t>(i)] = std::string("error: ") + e.what();
      }
    });
  }
  go = true;
  for (auto& thread : threads) {
    thread.join();
  }
  return results;
}

}  // namespace

TEST_CASE("200 concurrent creates with distinct names all succeed, none duplicated",
          "[concurrency]") {
  constexpr int kCreates = 200;
  constexpr std::size_t kCap = 8;
  Host host("concurrency.xml",
            [](agent::AgentConfig& config) { config.max_concurrent_creates = kCap; });
  CrashSwitch never;
  FaultyHypervisor counting(host.hypervisor, never);
  std::atomic<int> in_flight{0};
  std::atomic<int> most_in_flight{0};
  counting.before = [&](const std::string& operation) {
    if (operation == "create_overlay") {
      const int now = ++in_flight;
      int seen = most_in_flight.load();
      while (now > seen && !most_in_flight.compare_exchange_weak(seen, now)) {
      }
    }
  };
  counting.after = [&](const std::string& operation) {
    if (operation == "start") {
      --in_flight;
    }
  };
  auto service = host.service(counting, host.store);

  const auto provider_ids = run_concurrently(kCreates, [&](int i) {
    const auto instance =
        service->create(kControllerId, bootstrap_for("garm-burst" + std::to_string(i)));
    return instance.status == wire::InstanceStatus::running ? instance.provider_id : "not running";
  });
  const std::set<std::string> unique(provider_ids.begin(), provider_ids.end());
  for (const auto& id : provider_ids) {
    CHECK_THAT(id, !Catch::StartsWith("error") && !Catch::Equals("not running"));
  }
  CHECK(unique.size() == kCreates);
  CHECK(service->list(kControllerId, pool_id(kPool)).size() == kCreates);
  CHECK(host.tagged_domain_count() == kCreates);
  CHECK(host.store.list().size() == kCreates);
  CHECK(most_in_flight <= static_cast<int>(kCap));
  CHECK(most_in_flight >= 1);
}

TEST_CASE("concurrent creates of one name make one instance", "[concurrency]") {
  Host host("concurrency.xml");
  auto service = host.service();
  const auto provider_ids = run_concurrently(20, [&](int) {
    return service->create(kControllerId, bootstrap_for("garm-racer")).provider_id;
  });
  CHECK(std::set<std::string>(provider_ids.begin(), provider_ids.end()).size() == 1);
  CHECK_THAT(provider_ids.front(), !Catch::StartsWith("error"));
  CHECK(host.tagged_domain_count() == 1);
}

TEST_CASE("concurrent deletes of one instance all succeed and leave nothing", "[concurrency]") {
  Host host("concurrency.xml");
  auto service = host.service();
  const auto created = service->create(kControllerId, bootstrap_for("garm-deleted"));
  const auto results = run_concurrently(10, [&](int i) {
    const bool removed = service->remove(
        kControllerId, instance_ref(i % 2 == 0 ? created.provider_id : "garm-deleted"));
    return std::string(removed ? "removed" : "absent");
  });
  CHECK(std::count(results.begin(), results.end(), "removed") == 1);
  CHECK(std::count(results.begin(), results.end(), "absent") == 9);
  CHECK(host.holds_nothing_of(kController, "garm-deleted"));
}

TEST_CASE("listing while instances are deleted returns whole answers and never fails",
          "[concurrency]") {
  Host host("concurrency.xml");
  auto service = host.service();
  for (int i = 0; i < 60; ++i) {
    service->create(kControllerId, bootstrap_for("garm-churn" + std::to_string(i)));
  }
  std::atomic<bool> deleting{true};
  std::thread deleter([&] {
    for (int i = 0; i < 60; ++i) {
      service->remove(kControllerId, instance_ref("garm-churn" + std::to_string(i)));
    }
    deleting = false;
  });
  std::size_t lists = 0;
  std::size_t previous = 61;
  while (deleting) {
    const auto listed =
        service->list(kControllerId, pool_id(kPool));  // throws on any libvirt failure
    CHECK(listed.size() <= previous);
    previous = listed.size();
    ++lists;
  }
  deleter.join();
  CHECK(lists > 0);
  CHECK(service->list(kControllerId, pool_id(kPool)).empty());
}
