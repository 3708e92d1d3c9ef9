#include "agent/daemon/systemd_notify.hpp"

#include <charconv>
#include <cstdlib>
#include <cstring>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "common/unique_fd.hpp"

namespace garm_edge::agent {
namespace {

std::optional<long long> env_number(const char* name) {
  const char* text = std::getenv(name);
  if (text == nullptr) {
    return std::nullopt;
  }
  long long value = 0;
  const auto end = text + std::strlen(text);
  const auto [ptr, ec] = std::from_chars(text, end, value);
  if (ec != std::errc() || ptr != end || value <= 0) {
    return std::nullopt;
  }
  return value;
}

}  // namespace

SystemdNotifier::SystemdNotifier() {
  if (const char* path = std::getenv("NOTIFY_SOCKET");
      path != nullptr && (path[0] == '/' || path[0] == '@') && std::strlen(path) < 108) {
    socket_path_ = path;
  }
  const auto usec = env_number("WATCHDOG_USEC");
  const auto pid = env_number("WATCHDOG_PID");
  if (usec && (!pid || *pid == ::getpid())) {
    watchdog_interval_ = std::chrono::microseconds(*usec / 2);
  }
}

bool SystemdNotifier::notify(std::string_view state) const {
  if (socket_path_.empty()) {
    return false;
  }
  const UniqueFd socket(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (socket.get() < 0) {
    return false;
  }
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, socket_path_.data(), socket_path_.size());
  if (address.sun_path[0] == '@') {
    address.sun_path[0] = '\0';  // abstract namespace
  }
  const auto length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + socket_path_.size());
  return ::sendto(socket.get(), state.data(), state.size(), MSG_NOSIGNAL,
                  reinterpret_cast<const sockaddr*>(&address),
                  length) == static_cast<ssize_t>(state.size());
}

void SystemdNotifier::ready(std::string_view status) const {
  notify("READY=1\nSTATUS=" + std::string(status));
}

void SystemdNotifier::reloading() const {
  timespec now{};
  ::clock_gettime(CLOCK_MONOTONIC, &now);
  const auto usec = static_cast<long long>(now.tv_sec) * 1'000'000 + now.tv_nsec / 1000;
  notify("RELOADING=1\nMONOTONIC_USEC=" + std::to_string(usec));
}

void SystemdNotifier::stopping() const {
  notify("STOPPING=1");
}

void SystemdNotifier::watchdog() const {
  notify("WATCHDOG=1");
}

}  // namespace garm_edge::agent
