#pragma once

#include <cstddef>
#include <deque>
#include <mutex>
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
/// line (`event=created instance=... controller=... detail="..."`).
class EventLog {
 public:
  EventLog(const Clock& clock, Logger& log, std::size_t capacity = 2000)
      : clock_(clock), log_(log), capacity_(capacity) {}

  void record(std::string_view event, std::string_view instance, std::string_view controller_id,
              std::string_view detail = "");
  /// Oldest first; only `controller_id`'s, and only `instance`'s when it is not empty.
  std::vector<InstanceEvent> recent(std::string_view controller_id,
                                    std::string_view instance = "") const;

 private:
  const Clock& clock_;
  Logger& log_;
  std::size_t capacity_;
  mutable std::mutex mutex_;
  std::deque<InstanceEvent> events_;
};

}  // namespace garm_edge::agent
