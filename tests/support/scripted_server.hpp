#pragma once

#include <arpa/inet.h>
#include <mutex>
#include <netinet/in.h>
#include <string>
#include <sys/socket.h>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "common/unique_fd.hpp"

namespace garm_edge::testing {

/// A plain HTTP server on a loopback port that answers every connection with `answer`, then
/// holds it open (silent) until destroyed: a source that misbehaves on purpose.
class ScriptedServer {
 public:
  explicit ScriptedServer(std::string answer)
      : answer_(std::move(answer)), listener_(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t size = sizeof address;
    REQUIRE(::bind(listener_.get(), reinterpret_cast<sockaddr*>(&address), size) == 0);
    REQUIRE(::listen(listener_.get(), 4) == 0);
    REQUIRE(::getsockname(listener_.get(), reinterpret_cast<sockaddr*>(&address), &size) == 0);
    port_ = ntohs(address.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~ScriptedServer() {
    ::shutdown(listener_.get(), SHUT_RDWR);
    thread_.join();
  }
  ScriptedServer(const ScriptedServer&) = delete;
  ScriptedServer& operator=(const ScriptedServer&) = delete;

  std::string url(const std::string& path) const {
    return "http://127.0.0.1:" + std::to_string(port_) + path;
  }
  /// What the requests' heads held, in arrival order.
  std::vector<std::string> requests() const {
    const std::lock_guard lock(mutex_);
    return requests_;
  }

 private:
  void serve() {
    std::vector<UniqueFd> held;
    for (;;) {
      UniqueFd connection(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
      if (connection.get() < 0) {
        return;
      }
      char request[4096];
      const auto got = ::recv(connection.get(), request, sizeof request, 0);
      {
        const std::lock_guard lock(mutex_);
        requests_.emplace_back(request, got > 0 ? static_cast<std::size_t>(got) : 0U);
      }
      [[maybe_unused]] const auto sent =
          ::send(connection.get(), answer_.data(), answer_.size(), MSG_NOSIGNAL);
      held.push_back(std::move(connection));
    }
  }

  std::string answer_;
  UniqueFd listener_;
  std::uint16_t port_ = 0;
  mutable std::mutex mutex_;
  std::vector<std::string> requests_;
  std::thread thread_;
};

}  // namespace garm_edge::testing
