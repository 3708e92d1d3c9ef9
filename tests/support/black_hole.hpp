#pragma once

#include <cstdint>
#include <netinet/in.h>
#include <sys/socket.h>

#include <catch2/catch.hpp>

#include "common/unique_fd.hpp"

namespace garm_edge::testing {

/// Accepts TCP connections (the kernel does, from the backlog) and never says a word: a host
/// whose agent hangs, or a black-holed route that still completes handshakes.
class BlackHole {
 public:
  /// `port`: one a server just left (a machine that went silent where it answered); any free
  /// one when 0.
  explicit BlackHole(std::uint16_t port = 0)
      : fd_(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    const int reuse = 1;
    ::setsockopt(fd_.get(), SOL_SOCKET, SO_REUSEADDR, &reuse, sizeof reuse);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(port);
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof address;
    REQUIRE(::bind(fd_.get(), reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
    REQUIRE(::listen(fd_.get(), 128) == 0);
    REQUIRE(::getsockname(fd_.get(), reinterpret_cast<sockaddr*>(&address), &length) == 0);
    port_ = ntohs(address.sin_port);
  }
  std::uint16_t port() const { return port_; }

 private:
  UniqueFd fd_;
  std::uint16_t port_ = 0;
};

}  // namespace garm_edge::testing
