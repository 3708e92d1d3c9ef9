#pragma once

#include <chrono>
#include <optional>
#include <string>

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

/// RFC 3339 in UTC with second precision, e.g. 2026-11-22T00:30:43Z.
std::string format_rfc3339(std::chrono::system_clock::time_point time);
/// What format_rfc3339 writes, read back; nothing for any other text.
std::optional<std::chrono::system_clock::time_point> parse_rfc3339(const std::string& text);

}  // namespace garm_edge::agent
