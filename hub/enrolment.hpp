#pragma once

#include <chrono>
#include <map>
#include <mutex>
#include <string>

namespace garm_edge::hub {

/// Failed enrolments per key (an address and a token ID) and minute: a token's secret cannot be
/// guessed at speed, and one key's failures never lock another out. Bounded: the oldest keys
/// are forgotten.
class EnrolmentLimiter {
 public:
  explicit EnrolmentLimiter(unsigned failures_per_minute) : limit_(failures_per_minute) {}
  bool allowed(const std::string& address, std::chrono::steady_clock::time_point now);
  void failed(const std::string& address, std::chrono::steady_clock::time_point now);

 private:
  struct Window {
    std::chrono::steady_clock::time_point start;
    unsigned failures = 0;
  };
  static constexpr std::size_t kMaxAddresses = 4096;
  unsigned limit_;
  std::mutex mutex_;
  std::map<std::string, Window> windows_;
};

}  // namespace garm_edge::hub
