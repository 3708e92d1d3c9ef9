#include "agent/base/clock.hpp"

#include <ctime>

namespace garm_edge::agent {

std::string format_rfc3339(std::chrono::system_clock::time_point time) {
  const std::time_t seconds = std::chrono::system_clock::to_time_t(time);
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char text[32] = {};
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

std::optional<std::chrono::system_clock::time_point> parse_rfc3339(const std::string& text) {
  std::tm utc{};
  const char* end = strptime(text.c_str(), "%Y-%m-%dT%H:%M:%SZ", &utc);
  if (end == nullptr || *end != '\0') {
    return std::nullopt;
  }
  return std::chrono::system_clock::from_time_t(timegm(&utc));
}

}  // namespace garm_edge::agent
