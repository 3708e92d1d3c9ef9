#pragma once

#include <mutex>
#include <string>
#include <string_view>

namespace garm_edge {

/// syslog priorities, so journald keeps the level of each line written with a `<N>` prefix.
enum class Level { error = 3, warning = 4, notice = 5, info = 6, debug = 7 };

/// Where a daemon's operational messages go (the agent's, the hub's). Callers pass text that is
/// already free of secrets; values from guests or garm are passed through printable_excerpt first.
class Logger {
 public:
  virtual ~Logger() = default;
  virtual void log(Level level, std::string_view message) = 0;

  void error(std::string_view message) { log(Level::error, message); }
  void warning(std::string_view message) { log(Level::warning, message); }
  void info(std::string_view message) { log(Level::info, message); }
};

/// One line per message on stderr, prefixed `<N>` for journald.
class StderrLogger final : public Logger {
 public:
  explicit StderrLogger(Level threshold = Level::info) : threshold_(threshold) {}
  void log(Level level, std::string_view message) override;

 private:
  Level threshold_;
  std::mutex mutex_;
};

}  // namespace garm_edge
