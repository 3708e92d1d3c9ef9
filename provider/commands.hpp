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

/// garm's answer for an instance no agent holds. Returned, not thrown: the first exception of a
/// static executable costs the unwinder a sort of every frame description (about 17 million
/// instructions, 60% of a GetInstance process), and garm asks for gone instances routinely.
inline Outcome not_found(const std::string& id) {
  return {kExitNotFound, "", "garm-provider-edge: no instance " + id + "\n"};
}

/// Runs one garm command as garm describes it in `environment` (GARM_COMMAND, GARM_CONTROLLER_ID,
/// GARM_INSTANCE_ID, GARM_POOL_ID, GARM_PROVIDER_CONFIG_FILE, GARM_INTERFACE_VERSION,
/// GARM_POOL_EXTRASPECS); `read_stdin` is called only for CreateInstance.
Outcome run_command(const std::map<std::string, std::string>& environment,
                    const std::function<std::string()>& read_stdin);

}  // namespace garm_edge::provider
