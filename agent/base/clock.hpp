#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "common/unix_time.hpp"

namespace garm_edge::agent {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual std::chrono::system_clock::time_point now() const = 0;
};

class SystemClock final : public Clock {
 public:
  std::chrono::system_clock::time_point now() const override {
    return std::chrono::system_clock::now();
  }
};

}  // namespace garm_edge::agent
