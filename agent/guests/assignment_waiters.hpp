#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "net/http_request.hpp"
#include "net/http_response.hpp"

namespace garm_edge::agent {

/// Warm guests' long polls for their assignment (`GET /warm/assignment?wait=N`), each held
/// without a worker until its guest is bound (wake) or its wait ends. A saved guest's poll is
/// held through the save: the restored guest gets its assignment on the connection it already
/// has, without starting a process (under TCG a restored guest starts every program cold).
/// At most one poll per guest: a second one ends the first with its answer now.
class AssignmentWaiters {
 public:
  using Clock = std::chrono::steady_clock;
  using Respond = std::function<void(net::HttpResponse)>;
  /// The answer for `domain` now, or nothing to go on waiting. `expired`: the guest's wait is
  /// over, so nothing means only that it waits on (a saved guest's).
  using Answer =
      std::function<std::optional<net::HttpResponse>(const std::string& domain, bool expired)>;

  struct Timing {
    /// Checks of a guest woken whose answer was not there yet (its record still locked).
    std::chrono::milliseconds after_wake{100};
    /// For how long after a wake those quick checks go on.
    std::chrono::milliseconds woken_for{std::chrono::seconds(2)};
    /// Checks of every waiting guest, for a wake that was missed.
    std::chrono::milliseconds sweep{std::chrono::seconds(5)};
  };

  explicit AssignmentWaiters(Answer answer) : AssignmentWaiters(std::move(answer), Timing{}) {}
  AssignmentWaiters(Answer answer, Timing timing);
  ~AssignmentWaiters() { stop(); }
  AssignmentWaiters(const AssignmentWaiters&) = delete;
  AssignmentWaiters& operator=(const AssignmentWaiters&) = delete;

  /// Holds `respond` for `domain` for `wait`, then asks Answer again (and again each `wait`
  /// while it says to wait on).
  void park(const std::string& domain, std::chrono::milliseconds wait, Respond respond);
  /// `domain` may have its answer now.
  void wake(const std::string& domain);
  /// Drops every poll unanswered and parks none any more (the event loop is done).
  void stop();
  std::size_t waiting() const;

 private:
  struct Waiter {
    std::uint64_t id = 0;
    Respond respond;
    std::chrono::milliseconds wait{0};
    Clock::time_point deadline;
    Clock::time_point next_check;
    Clock::time_point woken_at;
  };
  struct Due {
    std::string domain;
    std::uint64_t id;
    bool expired;
  };

  void run();
  std::vector<Due> due_locked(Clock::time_point now);
  Clock::time_point next_wakeup_locked() const;
  void check(const Due& due);

  Answer answer_;
  Timing timing_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::string, Waiter> waiters_;
  std::uint64_t next_id_ = 0;
  bool stopping_ = false;
  std::thread thread_;
};

/// 204: the guest is not bound yet; it asks again.
net::HttpResponse no_assignment_yet();

/// The wait a warm guest's `?wait=N` asks for (whole seconds, 1 to `max_seconds`); nothing
/// for a request that asks for none or for another.
std::optional<std::chrono::milliseconds> requested_wait(const net::HttpRequest& request,
                                                        int max_seconds);

}  // namespace garm_edge::agent
