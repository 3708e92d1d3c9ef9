#pragma once

#include <array>
#include <stdio.h>
#include <string>
#include <sys/wait.h>

namespace garm_edge::testing {

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

/// Runs a shell command line (tests only, with arguments the test controls).
inline CommandResult run_command(const std::string& command_line) {
  CommandResult result;
  FILE* pipe = ::popen((command_line + " 2>&1").c_str(), "r");
  if (pipe == nullptr) {
    return result;
  }
  std::array<char, 4096> buffer{};
  while (const auto got = ::fread(buffer.data(), 1, buffer.size(), pipe)) {
    result.output.append(buffer.data(), got);
  }
  const int status = ::pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

}  // namespace garm_edge::testing
