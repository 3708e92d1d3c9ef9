#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

namespace garm_edge {

/// Seconds since the epoch on the wall clock: what certificates' and tokens' times are in.
inline std::int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

/// `at` in UTC as strftime writes it with `format` (at most 31 characters).
std::string utc_text(std::chrono::system_clock::time_point at, const char* format)
    __attribute__((format(strftime, 2, 0)));

/// RFC 3339 in UTC with second precision, e.g. 2026-11-22T00:30:43Z.
std::string format_rfc3339(std::chrono::system_clock::time_point time);
/// What format_rfc3339 writes, read back; nothing for any other text.
std::optional<std::chrono::system_clock::time_point> parse_rfc3339(const std::string& text);

}  // namespace garm_edge
