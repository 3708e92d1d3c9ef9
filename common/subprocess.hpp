#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace garm_edge {

struct ProcessOptions {
  /// The process group is killed (SIGKILL) when this has passed.
  std::chrono::milliseconds timeout{std::chrono::minutes(10)};
  /// When it turns true the process group is killed within 100 ms. Must outlive the call.
  const std::atomic<bool>* stop = nullptr;
  /// Where standard output goes; -1: captured with standard error.
  int stdout_fd = -1;
  /// What is kept of the captured output; the rest is read and dropped.
  std::size_t max_output = 16 * 1024;
};

struct ProcessResult {
  int exit_code = -1;  // -1 when a signal ended it
  bool timed_out = false;
  bool stopped = false;
  std::string output;  // standard error (and output, unless redirected), at most max_output

  bool succeeded() const { return exit_code == 0 && !timed_out && !stopped; }
};

/// The first executable `name` in the system's directories (system_program_path()): the
/// agent's own PATH (a unit's, an operator's shell) does not choose what it runs.
std::optional<std::string> find_system_program(const std::string& name);
std::string system_program_path();

/// Runs `argv` (argv[0] searched in a fixed PATH of the system's directories) without a shell,
/// with standard input from /dev/null, an environment of only PATH and LC_ALL=C, in a process
/// group of its own. Waits for it, however it ends. Throws std::system_error when it cannot
/// be started.
ProcessResult run_process(const std::vector<std::string>& argv, const ProcessOptions& options);

}  // namespace garm_edge
