#include "net/unix_socket.hpp"

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fcntl.h>
#include <functional>
#include <optional>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <system_error>

namespace garm_edge::net {
namespace fs = std::filesystem;
namespace {

[[noreturn]] void fail(const std::string& what) {
  throw std::system_error(errno, std::generic_category(), what);
}

/// The socket's address, short enough for sun_path: the path itself, or the name under an
/// O_PATH descriptor of its directory (kept open while the address is used).
class SocketAddress {
 public:
  explicit SocketAddress(const fs::path& path)
      : directory_(path.string().size() >= sizeof(sockaddr_un::sun_path)
                       ? ::open(path.parent_path().c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC)
                       : -1) {
    std::string name = path.string();
    if (name.size() >= sizeof(address_.sun_path)) {
      if (directory_.get() < 0) {
        fail("cannot open " + path.parent_path().string());
      }
      name = "/proc/self/fd/" + std::to_string(directory_.get()) + "/" + path.filename().string();
      if (name.size() >= sizeof(address_.sun_path)) {
        errno = ENAMETOOLONG;
        fail("socket name " + path.filename().string());
      }
    }
    address_.sun_family = AF_UNIX;
    std::memcpy(address_.sun_path, name.c_str(), name.size() + 1);
  }
  const sockaddr* get() const { return reinterpret_cast<const sockaddr*>(&address_); }
  socklen_t size() const { return sizeof(address_); }
  const char* name() const { return address_.sun_path; }

 private:
  sockaddr_un address_{};
  UniqueFd directory_;
};

}  // namespace

UniqueFd listen_unix(const fs::path& path) {
  const SocketAddress address(path);
  struct stat existing {};
  if (::lstat(path.c_str(), &existing) == 0) {
    if (!S_ISSOCK(existing.st_mode)) {
      errno = EEXIST;
      fail(path.string() + " exists and is no socket");
    }
    ::unlink(path.c_str());
  }
  UniqueFd socket(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (socket.get() < 0) {
    fail("socket");
  }
  // 0600 from the start: no moment in which another account could connect.
  const auto previous = ::umask(0177);
  const int bound = ::bind(socket.get(), address.get(), address.size());
  ::umask(previous);
  if (bound != 0) {
    fail("cannot bind " + path.string());
  }
  if (::listen(socket.get(), 16) != 0) {
    fail("cannot listen on " + path.string());
  }
  return socket;
}

UniqueFd connect_unix(const fs::path& path) {
  UniqueFd socket(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (socket.get() < 0) {
    return socket;
  }
  try {
    const SocketAddress address(path);
    if (::connect(socket.get(), address.get(), address.size()) == 0) {
      return socket;
    }
  } catch (const std::system_error&) {  // errno says why
  }
  const int error = errno;
  ::close(socket.release());
  errno = error;
  return UniqueFd();
}

long peer_uid(int fd) {
  ucred credentials{};
  socklen_t size = sizeof credentials;
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &credentials, &size) != 0) {
    return -1;
  }
  return static_cast<long>(credentials.uid);
}

void set_io_timeout(int fd, std::chrono::milliseconds timeout) {
  timeval value{};
  value.tv_sec = static_cast<time_t>(timeout.count() / 1000);
  value.tv_usec = static_cast<suseconds_t>((timeout.count() % 1000) * 1000);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &value, sizeof value);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &value, sizeof value);
}

}  // namespace garm_edge::net
