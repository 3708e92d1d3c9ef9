#include <atomic>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "agent/instances/create_gate.hpp"
#include "agent/instances/keyed_mutex.hpp"

using namespace garm_edge::agent;

TEST_CASE("one key is held by one caller at a time; other keys are independent", "[locks]") {
  KeyedMutex locks;
  auto held = locks.lock("a");
  CHECK_FALSE(locks.try_lock("a").has_value());
  CHECK(locks.try_lock("b").has_value());
  std::atomic<int> inside{0};
  std::atomic<int> most{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&] {
      auto guard = locks.lock("shared");
      const int now = ++inside;
      most = std::max(most.load(), now);
      std::this_thread::yield();
      --inside;
    });
  }
  for (auto& thread : threads) {
    thread.join();
  }
  CHECK(most == 1);
}

TEST_CASE("the create gate admits at most its capacity and queues the rest", "[locks]") {
  CreateGate gate(3);
  std::atomic<int> inside{0};
  std::atomic<int> most{0};
  std::atomic<int> done{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 20; ++i) {
    threads.emplace_back([&] {
      auto slot = gate.acquire();
      const int now = ++inside;
      int seen = most.load();
      while (now > seen && !most.compare_exchange_weak(seen, now)) {
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      --inside;
      ++done;
    });
  }
  for (auto& thread : threads) {
    thread.join();
  }
  CHECK(done == 20);
  CHECK(most <= 3);
  CHECK(most >= 1);
  CHECK(gate.running() == 0);
}
