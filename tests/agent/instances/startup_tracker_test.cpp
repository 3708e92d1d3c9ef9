#include "agent/instances/startup_tracker.hpp"

#include <catch2/catch.hpp>

#include "support/settable_clock.hpp"

using garm_edge::agent::StartupFailure;
using garm_edge::agent::StartupLabels;
using garm_edge::agent::StartupPhase;
using garm_edge::agent::StartupTracker;

namespace {

StartupLabels startup_labels(const std::string& pool, bool warm = false) {
  return {.pool = pool, .image = "noble", .flavor = "small", .warm = warm};
}

bool metrics_hold(const std::string& text, const std::string& line) {
  return text.find(line + "\n") != std::string::npos;
}

}  // namespace

TEST_CASE("a cold start's phases are timed in order, and its whole start when the runner is idle",
          "[startup]") {
  garm_edge::testing::SettableClock clock;
  StartupTracker tracker(clock);
  tracker.begin("d1", "runner-1", "ctl", startup_labels("pool-a"), clock.now());
  clock.advance(std::chrono::seconds(1));
  tracker.mark("d1", StartupPhase::defined);
  tracker.mark("d1", StartupPhase::started);
  clock.advance(std::chrono::seconds(4));
  tracker.mark("d1", StartupPhase::seed_fetched);
  tracker.mark("d1", StartupPhase::defined);  // passed: ignored
  clock.advance(std::chrono::seconds(15));
  tracker.mark("d1", StartupPhase::first_status);
  clock.advance(std::chrono::seconds(5));
  const auto finished = tracker.mark("d1", StartupPhase::idle);
  REQUIRE(finished);
  CHECK(finished->summary() ==
        "ready in 25.0 s (cold): defined +1.0 s, started +1.0 s, seed_fetched +5.0 s, "
        "first_status +20.0 s, idle +25.0 s");
  CHECK_FALSE(tracker.mark("d1", StartupPhase::idle));  // once
  const auto text = tracker.render_metrics();
  const std::string labels = "start=\"cold\",pool=\"pool-a\",image=\"noble\",flavor=\"small\"";
  CHECK(metrics_hold(text, "garm_edge_startup_seconds_bucket{" + labels + ",le=\"20\"} 0"));
  CHECK(metrics_hold(text, "garm_edge_startup_seconds_bucket{" + labels + ",le=\"30\"} 1"));
  CHECK(metrics_hold(text, "garm_edge_startup_seconds_sum{" + labels + "} 25"));
  CHECK(metrics_hold(
      text, "garm_edge_startup_phase_seconds_sum{" + labels + ",phase=\"first_status\"} 15"));
  CHECK(metrics_hold(text, "garm_edge_startups_in_progress 0"));
  const auto timeline = tracker.timeline("d1");
  REQUIRE(timeline);
  CHECK(timeline->marks.size() == 6);
}

TEST_CASE("starts that never reach idle are counted by reason", "[startup]") {
  garm_edge::testing::SettableClock clock;
  StartupTracker tracker(clock);
  for (const auto* domain : {"failed", "deleted", "late", "create"}) {
    tracker.begin(domain, domain, "ctl", startup_labels("p"), clock.now());
  }
  tracker.fail("failed", StartupFailure::guest_error);
  tracker.forget("deleted");
  tracker.fail("create", StartupFailure::create_failed);
  clock.advance(std::chrono::minutes(21));
  const auto text = tracker.render_metrics();
  const std::string labels = "start=\"cold\",pool=\"p\",image=\"noble\",flavor=\"small\"";
  for (const auto* reason :
       {"guest_error", "deleted_first", "bootstrap_timeout", "create_failed"}) {
    CHECK(metrics_hold(
        text, "garm_edge_startup_failures_total{" + labels + ",reason=\"" + reason + "\"} 1"));
  }
  CHECK_FALSE(tracker.mark("late", StartupPhase::idle));  // it timed out
  tracker.forget("failed");                               // finished: not counted again
  CHECK(metrics_hold(tracker.render_metrics(), "garm_edge_startup_failures_total{" + labels +
                                                   ",reason=\"deleted_first\"} 1"));
}

TEST_CASE("a warm start runs from its binding", "[startup]") {
  garm_edge::testing::SettableClock clock;
  StartupTracker tracker(clock);
  tracker.begin("warm-1", "runner-2", "ctl", startup_labels("p", true), clock.now());
  clock.advance(std::chrono::seconds(2));
  tracker.mark("warm-1", StartupPhase::first_status);
  const auto finished = tracker.mark("warm-1", StartupPhase::idle);
  REQUIRE(finished);
  CHECK(finished->summary() == "ready in 2.0 s (warm): first_status +2.0 s, idle +2.0 s");
  const auto text = tracker.render_metrics();
  CHECK(metrics_hold(text,
                     "garm_edge_startup_seconds_count{start=\"warm\",pool=\"p\",image="
                     "\"noble\",flavor=\"small\"} 1"));
  CHECK(text.find("garm_edge_startup_failures_total{") == std::string::npos);
}

TEST_CASE("start-up labels and timelines stay bounded whatever garm sends", "[startup]") {
  garm_edge::testing::SettableClock clock;
  StartupTracker tracker(
      clock, {.bootstrap_timeout = std::chrono::minutes(20), .max_pools = 2, .max_tracked = 8});
  for (int i = 0; i < 100; ++i) {
    const auto domain = "d" + std::to_string(i);
    tracker.begin(domain, domain, "ctl", startup_labels("pool-" + std::to_string(i)), clock.now());
    tracker.mark(domain, StartupPhase::defined);
  }
  const auto text = tracker.render_metrics();
  CHECK(text.find("pool=\"pool-0\"") != std::string::npos);
  CHECK(text.find("pool=\"pool-1\"") != std::string::npos);
  CHECK(text.find("pool=\"pool-2\"") == std::string::npos);
  CHECK(text.find("pool=\"other\"") != std::string::npos);
  CHECK_FALSE(tracker.timeline("d0"));
  CHECK(tracker.timeline("d99"));
  CHECK(metrics_hold(text, "garm_edge_startups_in_progress 7"));
}

TEST_CASE(
    "one controller's made-up pools never fold another's into other, and idle pools free "
    "their slots",
    "[startup]") {
  garm_edge::testing::SettableClock clock;
  StartupTracker tracker(clock, {.bootstrap_timeout = std::chrono::minutes(20),
                                 .max_pools = 2,
                                 .pool_idle = std::chrono::minutes(60),
                                 .max_pool_slots = 16,
                                 .max_tracked = 64});
  const auto start = [&](const std::string& domain, const std::string& controller,
                         const std::string& pool) {
    tracker.begin(domain, domain, controller, startup_labels(pool), clock.now());
    tracker.mark(domain, StartupPhase::defined);
  };
  for (int i = 0; i < 10; ++i) {
    start("a" + std::to_string(i), "tenant-a", "made-up-" + std::to_string(i));
  }
  start("b0", "tenant-b", "pool-b");
  auto text = tracker.render_metrics();
  CHECK(text.find("pool=\"pool-b\"") != std::string::npos);
  CHECK(text.find("pool=\"made-up-1\"") != std::string::npos);
  CHECK(text.find("pool=\"made-up-2\"") == std::string::npos);
  CHECK(text.find("pool=\"other\"") != std::string::npos);

  // Tenant A's instances are gone and an hour passes: its slots are free, its old series gone;
  // B's pool keeps its slot while B's instance is there.
  for (int i = 0; i < 10; ++i) {
    tracker.forget("a" + std::to_string(i));
  }
  clock.advance(std::chrono::minutes(61));
  start("a-new", "tenant-a", "real-pool");
  text = tracker.render_metrics();
  CHECK(text.find("pool=\"real-pool\"") != std::string::npos);
  CHECK(text.find("pool=\"made-up-0\"") == std::string::npos);
  CHECK(text.find("pool=\"pool-b\"") != std::string::npos);
}
