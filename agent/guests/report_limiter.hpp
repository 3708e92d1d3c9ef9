#pragma once

#include <chrono>
#include <cstddef>
#include <map>
#include <mutex>
#include <string>

namespace garm_edge::agent {

/// Which of a guest's status reports the agent records (in its record, its event ring and its
/// log); garm gets every one through the relay either way. A repeat of the last recorded report
/// is never recorded; any other at most `per_window` times a window (status text is the guest's
/// own, so a change of it counts too), except idle and failed, which close the guest's access
/// and are always recorded. So one guest reporting in a loop costs neither disk writes nor log
/// lines nor other guests' history.
class ReportLimiter {
 public:
  struct Limits {
    std::size_t per_window = 20;
    std::chrono::seconds window{60};
    std::size_t max_guests = 4096;  // beyond it, guests quiet for a window are forgotten
  };
  using Clock = std::chrono::steady_clock;

  ReportLimiter() : ReportLimiter(Limits{}) {}
  explicit ReportLimiter(Limits limits) : limits_(limits) {}

  /// Whether to record this report of `guest`'s; `suppressed` is set to how many of its
  /// reports were not recorded since the last one that was.
  bool admit(const std::string& guest, const std::string& status, const std::string& message,
             std::size_t& suppressed, Clock::time_point now = Clock::now());

 private:
  struct Seen {
    std::string status;
    std::string message;
    Clock::time_point window_start;
    std::size_t in_window = 0;
    std::size_t suppressed = 0;
  };
  void forget_quiet(Clock::time_point now);

  Limits limits_;
  std::mutex mutex_;
  std::map<std::string, Seen> guests_;
};

}  // namespace garm_edge::agent
