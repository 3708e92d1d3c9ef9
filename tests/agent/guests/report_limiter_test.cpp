#include "agent/guests/report_limiter.hpp"

#include <catch2/catch.hpp>

#include "agent/base/clock.hpp"
#include "agent/base/log.hpp"
#include "agent/instances/event_log.hpp"

using namespace garm_edge;
using namespace std::chrono_literals;

namespace {

struct CountingLogger final : agent::Logger {
  std::size_t lines = 0;
  void log(agent::Level, std::string_view) override { ++lines; }
};

}  // namespace

TEST_CASE("a guest's repeated reports are recorded once, idle and failed always",
          "[guests][reports]") {
  agent::ReportLimiter limiter({.per_window = 3, .window = 60s, .max_guests = 16});
  const auto start = agent::ReportLimiter::Clock::now();
  std::size_t suppressed = 0;
  CHECK(limiter.admit("a", "installing", "step", suppressed, start));
  for (int i = 0; i < 1000; ++i) {
    CHECK_FALSE(limiter.admit("a", "installing", "step", suppressed, start + 1s));
  }
  CHECK(limiter.admit("b", "installing", "step", suppressed, start + 1s));  // b is its own
  CHECK(limiter.admit("a", "installing", "step 2", suppressed, start + 2s));
  CHECK(suppressed == 1000);
  CHECK(limiter.admit("a", "installing", "step 3", suppressed, start + 2s));
  CHECK_FALSE(limiter.admit("a", "installing", "step 4", suppressed, start + 2s));  // 3 a window
  // Status text is the guest's own: alternating it is no way around the window.
  CHECK_FALSE(limiter.admit("a", "x", "step", suppressed, start + 2s));
  CHECK_FALSE(limiter.admit("a", "y", "step", suppressed, start + 2s));
  CHECK(limiter.admit("a", "idle", "done", suppressed, start + 2s));        // closes access: always
  CHECK_FALSE(limiter.admit("a", "idle", "done", suppressed, start + 3s));  // not its repeat
  CHECK(limiter.admit("a", "installing", "again", suppressed, start + 61s));  // a new window
}

TEST_CASE("each controller keeps its own event history", "[guests][reports]") {
  agent::SystemClock clock;
  CountingLogger log;
  agent::EventLog events(clock, log, {.per_controller = 10, .max_controllers = 2, .named = {}});
  events.record("created", "garm-a1", "controller-a");
  for (int i = 0; i < 500; ++i) {
    events.record("guest-installing", "garm-b1", "controller-b", std::to_string(i));
  }
  REQUIRE(events.recent("controller-a").size() == 1);  // b's flood did not push it out
  CHECK(events.recent("controller-a").front().event == "created");
  CHECK(events.recent("controller-b").size() == 10);
  CHECK(events.recent("controller-b").back().detail == "499");
  events.record("created", "garm-c1", "controller-c");  // a third: the least recent ring goes
  CHECK(events.recent("controller-a").empty());
  CHECK(events.recent("controller-b").size() == 10);
  CHECK(events.recent("controller-c").size() == 1);
}

TEST_CASE("a controller named in the configuration keeps its history whatever others do",
          "[guests][reports]") {
  agent::SystemClock clock;
  CountingLogger log;
  agent::EventLog events(clock, log,
                         {.per_controller = 10, .max_controllers = 2, .named = {"controller-a"}});
  events.record("created", "garm-a1", "controller-a");
  // A "*" client's instances under 40 made-up controllers, each more recent than A's.
  for (int i = 0; i < 40; ++i) {
    events.record("created", "garm-x", "made-up-" + std::to_string(i));
  }
  CHECK(events.recent("controller-a").size() == 1);  // before: gone after the second one
  CHECK(events.recent("made-up-39").size() == 1);
  CHECK(events.recent("made-up-38").size() == 1);
  CHECK(events.recent("made-up-37").empty());  // unnamed ones stay within max_controllers
}
