#include "agent/guests/report_limiter.hpp"

namespace garm_edge::agent {

bool ReportLimiter::admit(const std::string& guest, const std::string& status,
                          const std::string& message, std::size_t& suppressed,
                          Clock::time_point now) {
  std::lock_guard lock(mutex_);
  if (guests_.size() >= limits_.max_guests && !guests_.contains(guest)) {
    forget_quiet(now);
  }
  auto [seen, first] =
      guests_.try_emplace(guest, Seen{.status = "", .message = "", .window_start = now});
  auto& last = seen->second;
  if (now - last.window_start >= limits_.window) {
    last.window_start = now;
    last.in_window = 0;
  }
  // idle and failed close the guest's access: they are recorded whatever came before.
  const bool closing = status == "idle" || status == "failed";
  const bool repeat = !first && status == last.status && message == last.message;
  if (repeat || (!closing && last.in_window >= limits_.per_window)) {
    ++last.suppressed;
    return false;
  }
  last.status = status;
  last.message = message;
  ++last.in_window;
  suppressed = last.suppressed;
  last.suppressed = 0;
  return true;
}

void ReportLimiter::forget_quiet(Clock::time_point now) {
  std::erase_if(guests_, [&](const auto& entry) {
    return now - entry.second.window_start >= limits_.window;
  });
}

}  // namespace garm_edge::agent
