#pragma once

#include <unistd.h>
#include <utility>

namespace garm_edge {

/// Owns a file descriptor and closes it on every path out of a scope.
class UniqueFd {
 public:
  explicit UniqueFd(int fd = -1) : fd_(fd) {}
  ~UniqueFd() {
    if (fd_ >= 0) {
      ::close(fd_);
    }
  }
  UniqueFd(UniqueFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&&) = delete;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;

  int get() const { return fd_; }
  /// Gives up ownership (for a close whose error must be checked).
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

}  // namespace garm_edge
