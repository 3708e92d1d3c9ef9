#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <sys/eventfd.h>
#include <thread>

#include "agent/base/log.hpp"
#include "common/unique_fd.hpp"
#include "net/websocket_tunnel.hpp"

namespace garm_edge::agent {

/// The WebSockets garm-agent keeps open to garm's agent endpoint through the relay, each
/// carried on a thread of its own. At most `per_instance` per instance (garm keeps one; the
/// second covers a reconnect while the old one is torn down): one more ends the oldest. Each
/// ends when either side closes, when no byte passed for `idle` (both ends ping every 54 s),
/// when its instance is deleted, or when the agent stops.
class AgentSockets {
 public:
  struct Options {
    std::size_t per_instance = 2;
    /// garm and garm-agent each ping every 54 s and give up after 60 s without a pong: two
    /// silent minutes mean both ends are gone.
    std::chrono::milliseconds idle{std::chrono::seconds(120)};
    /// One write or read that stalls this long ends the socket.
    std::chrono::milliseconds stall{std::chrono::seconds(10)};
  };

  AgentSockets(Options options, Logger& log) : options_(options), log_(log) {}
  /// Closes every socket and waits for their threads.
  ~AgentSockets();
  AgentSockets(const AgentSockets&) = delete;
  AgentSockets& operator=(const AgentSockets&) = delete;

  /// Carries `tunnel` (switched to WebSocket) between `guest` and garm for the instance
  /// `domain_name` (garm's `instance_name`, for the log). `early_bytes` came from the guest
  /// after its upgrade request. `admitted` is asked last, atomically with close_instance: an
  /// instance revoked meanwhile gets no socket.
  void carry(const std::string& domain_name, const std::string& instance_name,
             std::shared_ptr<net::WebSocketTunnel> tunnel, UniqueFd guest, std::string early_bytes,
             const std::function<bool()>& admitted);
  /// Ends the instance's sockets (it is being deleted).
  void close_instance(std::string_view domain_name);
  /// Sockets open now: of one instance, or of all.
  std::size_t open(std::string_view domain_name) const;
  std::size_t open() const;

 private:
  struct Socket {
    explicit Socket(std::string domain) : domain_name(std::move(domain)) {}
    std::string domain_name;
    UniqueFd stop{::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)};  // written to end the socket
    std::atomic<bool> done{false};
    std::thread thread;
  };
  /// Joins the threads of sockets that ended. Called with mutex_ held (their threads never
  /// take it).
  void reap();
  static void signal(const Socket& socket);

  Options options_;
  Logger& log_;
  mutable std::mutex mutex_;
  std::list<std::unique_ptr<Socket>> sockets_;  // oldest first
};

}  // namespace garm_edge::agent
