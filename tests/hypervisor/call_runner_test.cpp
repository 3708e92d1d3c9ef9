#include "hypervisor/call_runner.hpp"

#include <thread>

#include <catch2/catch.hpp>

using namespace garm_edge::hypervisor;
using namespace std::chrono_literals;

TEST_CASE("calls return their value or rethrow their error", "[deadline]") {
  CallRunner runner(2);
  CHECK(runner.run(1s, "add", [] { return 40 + 2; }) == 42);
  CHECK_THROWS_WITH(
      runner.run(1s, "fail",
                 []() -> int { throw HypervisorError(HypervisorError::Kind::not_found, "gone"); }),
      "gone");
}

TEST_CASE("a call past its deadline is a timeout error, and a queued call never starts",
          "[deadline]") {
  CallRunner runner(1);
  std::atomic<bool> release{false};
  std::atomic<bool> second_ran{false};
  try {
    runner.run(50ms, "hung call", [&] {
      while (!release) {
        std::this_thread::sleep_for(1ms);
      }
      return 0;
    });
    FAIL("expected a timeout");
  } catch (const HypervisorError& e) {
    CHECK(e.kind() == HypervisorError::Kind::timeout);
    CHECK_THAT(e.what(), Catch::Contains("hung call did not finish within 50 ms"));
  }
  // The only worker is still stuck, so this one waits in the queue and times out too.
  CHECK_THROWS_AS(runner.run(50ms, "queued",
                             [&] {
                               second_ran = true;
                               return 0;
                             }),
                  HypervisorError);
  release = true;
  CHECK(runner.run(1s, "after", [] { return 1; }) == 1);
  CHECK_FALSE(second_ran);
}
