#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "agent/base/clock.hpp"
#include "agent/base/log.hpp"

namespace garm_edge::agent {

/// One step in an instance's life, in Salt Cloud's vocabulary: creating, requesting,
/// deploying, created, destroying, destroyed; plus what its guest reported.
struct InstanceEvent {
  std::string time;  // RFC 3339
  std::string event;
  std::string instance;  // garm's name
  std::string controller_id;
  std::string detail;  // never a token or key
};

/// The latest events, for the control API, each also written to the log as one structured
/// line (`event=created instance=... controller=... detail="..."`). Each controller has its own
/// ring, so one controller's churn (or its guests' reports) never pushes out another's history.
/// The controllers named in the configuration always keep theirs; of the others (reachable only
/// through a `"*"` client) the `max_controllers` most recently active keep one.
class EventLog {
 public:
  struct Limits {
    std::size_t per_controller = 1000;
    std::size_t max_controllers = 32;
    std::set<std::string, std::less<>> named;  // never evicted, not counted
  };
  EventLog(const Clock& clock, Logger& log) : EventLog(clock, log, Limits{}) {}
  EventLog(const Clock& clock, Logger& log, Limits limits)
      : clock_(clock), log_(log), limits_(limits) {}

  void record(std::string_view event, std::string_view instance, std::string_view controller_id,
              std::string_view detail = "");
  /// Oldest first; only `controller_id`'s, and only `instance`'s when it is not empty.
  std::vector<InstanceEvent> recent(std::string_view controller_id,
                                    std::string_view instance = "") const;

 private:
  struct Ring {
    std::deque<InstanceEvent> events;
    std::uint64_t last_written = 0;
  };
  Ring& ring_for(const std::string& controller_id);
  /// Drops the least recently written rings of unnamed controllers until `kept` are left.
  void evict_unnamed_beyond(std::size_t kept);

  const Clock& clock_;
  Logger& log_;
  Limits limits_;
  mutable std::mutex mutex_;
  std::map<std::string, Ring, std::less<>> rings_;  // by controller ID ("" for the host's own)
  std::uint64_t writes_ = 0;
};

}  // namespace garm_edge::agent
