#include <atomic>
#include <chrono>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "agent/instances/create_gate.hpp"
#include "agent/instances/keyed_mutex.hpp"

using namespace garm_edge::agent;
using namespace std::chrono_literals;

namespace {

/// Raises `most` to `now` if it is below, without losing a concurrent raise.
void record_max(std::atomic<int>& most, int now) {
  int seen = most.load();
  while (now > seen && !most.compare_exchange_weak(seen, now)) {
  }
}

/// Waits up to 2 s for `condition`.
template <class Condition>
bool eventually(Condition condition) {
  const auto deadline = std::chrono::steady_clock::now() + 2s;
  while (!condition() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(1ms);
  }
  return condition();
}

}  // namespace

TEST_CASE("one key is held by one caller at a time, other keys are independent", "[locks]") {
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
      record_max(most, ++inside);
      std::this_thread::sleep_for(1ms);  // long enough for a second holder to be seen
      --inside;
    });
  }
  for (auto& thread : threads) {
    thread.join();
  }
  CHECK(most == 1);
}

TEST_CASE("deferred work never waits for a held key: the holder runs it before anyone else",
          "[locks]") {
  KeyedMutex locks;
  std::vector<std::string> ran;
  locks.run_or_defer("free", [&ran] { ran.push_back("at once"); });
  CHECK(ran == std::vector<std::string>{"at once"});

  std::optional<KeyedMutex::Guard> held = locks.lock("busy");
  locks.run_or_defer("busy", [&ran] { ran.push_back("first"); });
  locks.run_or_defer("busy", [] { throw std::runtime_error("answers nobody"); });
  locks.run_or_defer("busy", [&ran] { ran.push_back("second"); });
  CHECK(ran.size() == 1);  // returned without waiting, nothing ran yet
  std::atomic<bool> waiter_in{false};
  std::thread waiter([&] {
    auto guard = locks.lock("busy");
    waiter_in = true;
    ran.push_back("waiter");
  });
  std::this_thread::sleep_for(20ms);
  CHECK_FALSE(waiter_in);
  held.reset();  // the holder lets go: deferred work first, in order, a throw skipped
  waiter.join();
  CHECK(ran == std::vector<std::string>{"at once", "first", "second", "waiter"});
  CHECK(locks.try_lock("busy").has_value());  // nothing left held
}

TEST_CASE("a held key keeps a bounded amount of deferred work, the newest", "[locks]") {
  KeyedMutex locks;
  std::vector<std::size_t> ran;
  {
    auto held = locks.lock("busy");
    for (std::size_t i = 0; i < KeyedMutex::kMaxDeferred + 5; ++i) {
      locks.run_or_defer("busy", [&ran, i] { ran.push_back(i); });
    }
  }
  REQUIRE(ran.size() == KeyedMutex::kMaxDeferred);
  CHECK(ran.front() == 5);
  CHECK(ran.back() == KeyedMutex::kMaxDeferred + 4);
  CHECK(locks.dropped() == 5);
}

TEST_CASE("work handed over during the drain cannot keep the holder from letting go", "[locks]") {
  KeyedMutex locks;
  std::size_t ran = 0;
  std::function<void()> again = [&] {
    ++ran;
    locks.run_or_defer("busy", again);  // the key is still held: handed over again
  };
  {
    auto held = locks.lock("busy");
    locks.run_or_defer("busy", again);
  }  // without the bound: never returns
  CHECK(ran == KeyedMutex::kMaxDrained);
  CHECK(locks.dropped() == 1);
  CHECK(locks.try_lock("busy").has_value());
}

TEST_CASE("the create gate admits its capacity at once and the next create only after one ends",
          "[locks]") {
  CreateGate gate(3);
  std::vector<CreateGate::Slot> slots;
  for (int i = 0; i < 3; ++i) {
    slots.push_back(gate.acquire());  // three at once, none waiting on another
  }
  CHECK(gate.running() == 3);
  std::atomic<bool> fourth_in{false};
  std::thread fourth([&] {
    auto slot = gate.acquire();
    fourth_in = true;
  });
  std::this_thread::sleep_for(50ms);
  CHECK_FALSE(fourth_in);  // queued while the gate is full
  slots.pop_back();
  CHECK(eventually([&] { return fourth_in.load(); }));
  fourth.join();
  slots.clear();
  CHECK(gate.running() == 0);
}

TEST_CASE("under load the create gate never admits more than its capacity", "[locks]") {
  CreateGate gate(3);
  std::atomic<int> inside{0};
  std::atomic<int> most{0};
  std::atomic<int> done{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 20; ++i) {
    threads.emplace_back([&] {
      auto slot = gate.acquire();
      record_max(most, ++inside);
      std::this_thread::sleep_for(2ms);
      --inside;
      ++done;
    });
  }
  for (auto& thread : threads) {
    thread.join();
  }
  CHECK(done == 20);
  CHECK(most <= 3);
  CHECK(gate.running() == 0);
}
