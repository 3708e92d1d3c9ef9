#include "common/unix_time.hpp"

#include <ctime>

namespace garm_edge {

std::string utc_text(std::chrono::system_clock::time_point at, const char* format) {
  const std::time_t seconds = std::chrono::system_clock::to_time_t(at);
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char text[32] = {};
#pragma GCC diagnostic push
// Each caller's format is checked where it is written: the declaration carries format(strftime).
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
  std::strftime(text, sizeof text, format, &utc);
#pragma GCC diagnostic pop
  return text;
}

std::string format_rfc3339(std::chrono::system_clock::time_point time) {
  return utc_text(time, "%Y-%m-%dT%H:%M:%SZ");
}

std::optional<std::chrono::system_clock::time_point> parse_rfc3339(const std::string& text) {
  std::tm utc{};
  const char* end = strptime(text.c_str(), "%Y-%m-%dT%H:%M:%SZ", &utc);
  if (end == nullptr || *end != '\0') {
    return std::nullopt;
  }
  return std::chrono::system_clock::from_time_t(timegm(&utc));
}

}  // namespace garm_edge
