#pragma once

#include <chrono>
#include <filesystem>
#include <functional>
#include <optional>
#include <ostream>
#include <string>

#include "net/admin_protocol.hpp"

namespace garm_edge::net {

/// Asks the daemon serving `state_dir` (its admin_socket_path) to run `request`. Nothing when
/// none listens there (the CLI then works alone); throws std::runtime_error when one does but
/// cannot be asked (permission, a silent or broken answer). `progress` gets each progress line;
/// `daemon` names it in errors ("agent", "hub").
std::optional<AdminResult> ask_running_daemon(
    const std::filesystem::path& state_dir, const AdminRequest& request,
    const std::function<void(std::uint64_t bytes, std::uint64_t total)>& progress,
    std::chrono::milliseconds silence_limit = std::chrono::seconds(30),
    const std::string& daemon = "agent");

/// Prints a result as the CLI does (output, then "PROGRAM COMMAND: error") and gives
/// its exit code.
int print_admin_result(const AdminResult& result, const std::string& command, std::ostream& out,
                       std::ostream& err, const std::string& program = "garm-edge-agent");

}  // namespace garm_edge::net
