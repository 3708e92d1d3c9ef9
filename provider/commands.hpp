#pragma once

#include <functional>
#include <map>
#include <string>

namespace garm_edge::provider {

struct Outcome {
  int exit_code = 0;
  std::string out;  // exactly what garm parses
  std::string err;  // diagnostics; garm shows them only when the command failed
};

/// garm's exit code for "no such instance" (garm-provider-common ExitCodeNotFound).
inline constexpr int kExitNotFound = 30;

/// Runs one garm command as garm describes it in `environment` (GARM_COMMAND, GARM_CONTROLLER_ID,
/// GARM_INSTANCE_ID, GARM_POOL_ID, GARM_PROVIDER_CONFIG_FILE, GARM_INTERFACE_VERSION,
/// GARM_POOL_EXTRASPECS); `read_stdin` is called only for CreateInstance.
Outcome run_command(const std::map<std::string, std::string>& environment,
                    const std::function<std::string()>& read_stdin);

}  // namespace garm_edge::provider
