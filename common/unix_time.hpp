#pragma once

#include <chrono>
#include <cstdint>

namespace garm_edge {

/// Seconds since the epoch on the wall clock: what certificates' and tokens' times are in.
inline std::int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace garm_edge
