#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "common/log.hpp"
#include "common/unique_fd.hpp"
#include "net/admin_protocol.hpp"

namespace garm_edge::net {

/// A running daemon's local socket for its operator's commands (the agent's `images`,
/// `reconcile`; the hub's record commands), as virsh and docker reach their daemons: the CLI
/// asks the daemon instead of taking its state. Only root and the daemon's own account are
/// answered (SO_PEERCRED). Each command runs on a
/// thread of its own, at most `kMaxCommands` at once; a command's answer is JSON lines
/// (progress, a line every couple of seconds while it runs, then the result).
class AdminServer {
 public:
  using Progress = std::function<void(std::uint64_t bytes, std::uint64_t total)>;
  using Handler = std::function<AdminResult(const AdminRequest&, const Progress&)>;
  static constexpr std::size_t kMaxCommands = 4;

  /// Binds `path` (throws std::system_error); commands are served once start() is called.
  /// `daemon`: how its answers name it ("agent", "hub").
  AdminServer(const std::filesystem::path& path, Handler handler, Logger& log,
              std::string daemon = "agent");
  /// Stops accepting and waits for the commands under way (the caller ends long ones first:
  /// a pull ends when the image store stops).
  ~AdminServer();
  AdminServer(const AdminServer&) = delete;
  AdminServer& operator=(const AdminServer&) = delete;

  void start();
  /// No new connection is answered; the socket file goes.
  void stop_accepting();

 private:
  struct Connection;

  void accept_loop();
  void accept_one();
  void serve(Connection& connection);
  /// Sends `line` unless the caller went away; false once it has.
  static bool send(Connection& connection, const std::string& line);
  /// A line to every connection whose command still runs: the CLI knows the agent is alive.
  void send_keepalives();
  void reap_finished();

  std::filesystem::path path_;
  Handler handler_;
  Logger& log_;
  std::string daemon_;
  UniqueFd listener_;
  int wake_[2] = {-1, -1};  // written to end the accept loop
  std::thread acceptor_;
  std::atomic<bool> accepting_{true};
  std::mutex connections_mutex_;
  std::list<std::unique_ptr<Connection>> connections_;
};

}  // namespace garm_edge::net
