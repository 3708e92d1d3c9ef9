#pragma once

#include <chrono>
#include <filesystem>
#include <functional>
#include <optional>
#include <ostream>

#include "agent/admin/admin_protocol.hpp"

namespace garm_edge::agent {

/// Asks the agent serving `state_dir` to run `request`. Nothing when no agent listens there
/// (the CLI then works alone); throws std::runtime_error when one does but cannot be asked
/// (permission, a silent or broken answer). `progress` gets each progress line.
std::optional<AdminResult> ask_running_agent(
    const std::filesystem::path& state_dir, const AdminRequest& request,
    const std::function<void(std::uint64_t bytes, std::uint64_t total)>& progress,
    std::chrono::milliseconds silence_limit = std::chrono::seconds(30));

/// Prints a result as the CLI does (output, then "garm-edge-agent COMMAND: error") and gives
/// its exit code.
int print_admin_result(const AdminResult& result, const std::string& command, std::ostream& out,
                       std::ostream& err);

}  // namespace garm_edge::agent
