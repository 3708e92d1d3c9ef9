#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

namespace garm_edge::agent {

/// sd_notify(3) without libsystemd: datagrams to $NOTIFY_SOCKET (a path, or an abstract socket
/// when it starts with '@'). Does nothing when the agent was not started by systemd with
/// Type=notify.
class SystemdNotifier {
 public:
  /// Reads NOTIFY_SOCKET, WATCHDOG_USEC and WATCHDOG_PID from the environment.
  SystemdNotifier();

  bool enabled() const { return !socket_path_.empty(); }
  /// Sends `state` (e.g. "READY=1", "STOPPING=1"); false when it could not be sent.
  bool notify(std::string_view state) const;
  /// READY=1 with a STATUS= line.
  void ready(std::string_view status) const;
  /// RELOADING=1 with the CLOCK_MONOTONIC time systemd needs to match it to the reload.
  void reloading() const;
  void stopping() const;
  void watchdog() const;
  /// How often to send WATCHDOG=1 (half of WatchdogSec=), when systemd asked for it.
  std::optional<std::chrono::microseconds> watchdog_interval() const { return watchdog_interval_; }

 private:
  std::string socket_path_;
  std::optional<std::chrono::microseconds> watchdog_interval_;
};

}  // namespace garm_edge::agent
