#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "agent/base/clock.hpp"
#include "common/prometheus_text.hpp"

namespace garm_edge::agent {

/// Where a runner's start stands. A cold guest: garm's CreateInstance received, its domain
/// defined and started, its seed fetched, its first status report, its runner idle. A warm
/// guest: bound to garm's create, its first status report, idle; a saved one is restored from
/// its memory state between being taken and its first report.
enum class StartupPhase {
  received,
  bound,
  restored,
  defined,
  started,
  seed_fetched,
  first_status,
  idle
};
std::string_view to_string(StartupPhase phase);

/// Why a start never reached idle.
enum class StartupFailure { create_failed, guest_error, deleted_first, bootstrap_timeout };
std::string_view to_string(StartupFailure failure);

/// What a start is labelled with in /metrics (bounded: images and flavors are the config's;
/// each controller's pools beyond `max_pools` at once are folded into "other").
struct StartupLabels {
  std::string pool;
  std::string image;
  std::string flavor;
  bool warm = false;
  bool restored = false;  // a saved warm guest, restored
  /// The `start` label: cold, warm or restored.
  std::string_view start() const { return restored ? "restored" : warm ? "warm" : "cold"; }
};

struct StartupTimeline {
  std::string instance;  // garm's name
  std::string controller;
  StartupLabels labels;
  std::vector<std::pair<StartupPhase, std::chrono::system_clock::time_point>> marks;
  std::optional<StartupFailure> failure;
  bool finished() const {
    return failure || (!marks.empty() && marks.back().first == StartupPhase::idle);
  }
  /// "ready in 25.1 s: defined +0.4 s, started +1.2 s, ..." (each phase from the start).
  std::string summary() const;
};

/// Each instance's start-up timeline, by domain name, and the histograms and counters of every
/// finished one (docs/observability.md). Thread-safe; memory bounded by `max_tracked`.
class StartupTracker {
 public:
  struct Options {
    /// A start open this long is counted as a bootstrap timeout (garm's default
    /// runner_bootstrap_timeout is 20 minutes).
    std::chrono::seconds bootstrap_timeout{std::chrono::minutes(20)};
    /// Pool labels per controller: one tenant's made-up pools never fold another's into
    /// "other". A pool's slot is freed once none of its instances is tracked for `pool_idle`.
    std::size_t max_pools = 64;
    std::chrono::seconds pool_idle{std::chrono::hours(1)};
    /// Pool slots of every controller together (a client of every controller may name any).
    std::size_t max_pool_slots = 1024;
    std::size_t max_tracked = 4096;
  };
  explicit StartupTracker(const Clock& clock) : StartupTracker(clock, Options{}) {}
  StartupTracker(const Clock& clock, Options options);

  /// A start at `at` (received for a cold guest, bound for a warm one); replaces any earlier.
  void begin(const std::string& domain, const std::string& instance, const std::string& controller,
             StartupLabels labels, std::chrono::system_clock::time_point at);
  /// The phase's first mark; ignored for an unknown or finished start, and for a phase it
  /// passed. Returns the timeline when this mark finished it (idle).
  std::optional<StartupTimeline> mark(std::string_view domain, StartupPhase phase);
  /// The start ends without reaching idle, counted by reason (when it had not finished).
  void fail(std::string_view domain, StartupFailure failure);
  /// The instance is gone: its timeline too (a start still open is counted deleted_first).
  void forget(std::string_view domain);
  std::optional<StartupTimeline> timeline(std::string_view domain) const;
  /// Counts the starts past the bootstrap timeout first.
  std::string render_metrics();

 private:
  using Key =
      std::tuple<std::string, std::string, std::string, std::string>;  // start, pool, image, flavor
  /// The series a start counts in; takes (or refreshes) its pool's slot.
  Key key_of(const StartupTimeline& timeline);
  /// Frees the slots of pools idle for `pool_idle`, and their series when no controller holds
  /// the pool any more.
  void free_idle_pools(std::chrono::system_clock::time_point now);
  void observe(const StartupTimeline& timeline);
  void count_failure(const StartupTimeline& timeline, StartupFailure failure);
  /// Open starts past the bootstrap timeout fail; the oldest finished ones go past max_tracked.
  void expire(std::chrono::system_clock::time_point now);

  const Clock& clock_;
  Options options_;
  mutable std::mutex mutex_;
  std::map<std::string, StartupTimeline, std::less<>> timelines_;
  /// Each controller's pools with a label of their own, and when a start last counted in each.
  std::map<std::string, std::map<std::string, std::chrono::system_clock::time_point>> pool_slots_;
  std::size_t pool_slot_count_ = 0;
  std::map<std::pair<Key, std::string>, Histogram> phases_;  // by key and phase
  std::map<Key, Histogram> totals_;
  std::map<std::pair<Key, std::string>, std::uint64_t> failures_;  // by key and reason
};

}  // namespace garm_edge::agent
