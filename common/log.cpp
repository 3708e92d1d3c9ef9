#include "common/log.hpp"

#include <cstdio>

namespace garm_edge {

void StderrLogger::log(Level level, std::string_view message) {
  if (static_cast<int>(level) > static_cast<int>(threshold_)) {
    return;
  }
  std::lock_guard lock(mutex_);
  std::fprintf(stderr, "<%d>%.*s\n", static_cast<int>(level), static_cast<int>(message.size()),
               message.data());
}

}  // namespace garm_edge
