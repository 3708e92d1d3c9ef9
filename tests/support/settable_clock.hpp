#pragma once

#include <atomic>
#include <chrono>

#include "agent/base/clock.hpp"

namespace garm_edge::testing {

/// A clock a test moves on by hand (from the real time it was made at).
class SettableClock final : public agent::Clock {
 public:
  std::chrono::system_clock::time_point now() const override { return now_.load(); }
  void advance(std::chrono::seconds by) { now_ = now_.load() + by; }

 private:
  std::atomic<std::chrono::system_clock::time_point> now_{std::chrono::system_clock::now()};
};

}  // namespace garm_edge::testing
