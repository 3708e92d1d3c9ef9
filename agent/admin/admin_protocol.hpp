#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

namespace garm_edge::agent {

/// An operator's command for the running agent, as the CLI parsed it: one JSON line on the
/// admin socket.
struct AdminRequest {
  std::string command;  // "images", "caches" or "reconcile"
  std::string action;   // images: "list", "pull" or "remove"; caches: "list" or "refresh"
  std::string name;     // the image of images pull|remove, the cache of caches refresh

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

/// One line of the agent's answer: progress while a pull runs, then the result.
struct AdminReplyLine {
  std::optional<std::pair<std::uint64_t, std::uint64_t>> progress;  // bytes, total (0: unknown)
  std::optional<AdminResult> result;

  std::string to_line() const;
  /// Throws std::invalid_argument naming what is wrong.
  static AdminReplyLine from_line(std::string_view line);
};

/// `<state_dir>/admin.sock`: the directory is the agent's own (0700), the socket 0600, and the
/// agent also checks each caller's uid (SO_PEERCRED): root or the agent's own account.
std::filesystem::path admin_socket_path(const std::filesystem::path& state_dir);

/// A request line longer than this is refused: no caller grows the agent's memory.
constexpr std::size_t kAdminLineLimit = 4096;

}  // namespace garm_edge::agent
