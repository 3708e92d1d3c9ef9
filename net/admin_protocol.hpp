#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace garm_edge::net {

/// An operator's command for a running daemon (the agent, the hub), as its CLI parsed it: one
/// JSON line on the admin socket.
struct AdminRequest {
  std::string command;  // the agent: "images", "caches" or "reconcile"; the hub: its CLI's
  std::string action;   // images: "list", "pull" or "remove"; caches: "list" or "refresh"
  std::string name;     // the image of images pull|remove, the cache of caches refresh
  /// The hub: its command line from the command on, as its CLI was given it.
  std::vector<std::string> arguments = {};

  std::string to_line() const;
  /// Throws std::invalid_argument naming what is wrong.
  static AdminRequest from_line(std::string_view line);
};

/// How a command ended, as the CLI prints and exits with it.
struct AdminResult {
  int exit_code = 0;
  std::string output;  // printed on standard output
  std::string error;   // printed on standard error when the exit code is not 0
};

/// One line of the daemon's answer: progress while a command runs, then the result.
struct AdminReplyLine {
  std::optional<std::pair<std::uint64_t, std::uint64_t>> progress;  // bytes, total (0: unknown)
  std::optional<AdminResult> result;

  std::string to_line() const;
  /// Throws std::invalid_argument naming what is wrong.
  static AdminReplyLine from_line(std::string_view line);
};

/// `<state_dir>/admin.sock`: the directory is the daemon's own (0700), the socket 0600, and the
/// daemon also checks each caller's uid (SO_PEERCRED): root or the daemon's own account.
std::filesystem::path admin_socket_path(const std::filesystem::path& state_dir);

/// A request line longer than this is refused: no caller grows the daemon's memory.
constexpr std::size_t kAdminLineLimit = 4096;

}  // namespace garm_edge::net
