#pragma once

#include <string>
#include <vector>

#include "provider/commands.hpp"

namespace garm_edge::provider {

/// `garm-provider-edge status --config FILE [--json]`: one row per agent (reachable or the
/// error, version, arch, images, free and total vCPUs and memory, instances by state,
/// draining), asked of every agent at once under the probe deadline. Exit code 1 when an
/// agent did not answer, 2 for a usage error.
Outcome run_status(const std::vector<std::string>& arguments);

}  // namespace garm_edge::provider
