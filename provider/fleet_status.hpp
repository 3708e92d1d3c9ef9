#pragma once

#include <string>
#include <vector>

#include "provider/commands.hpp"

namespace garm_edge::provider {

/// `garm-provider-edge status --config FILE [--json]`: one row per agent (reachable or the
/// error, version, arch, the host's CPUs and memory, free vCPUs and memory of what may be
/// placed there, instances by state, draining, images), asked of every agent at once under the
/// probe deadline. Exit code 1 when an agent did not answer, 2 for a usage error.
Outcome run_status(const std::vector<std::string>& arguments);

/// `garm-provider-edge images pull NAME --config FILE`: every agent (direct or through a hub)
/// with a source for the image starts pulling it now. A line per agent; exit code 1 when an
/// agent or hub could not be asked or refused, 2 for a usage error.
Outcome run_images(const std::vector<std::string>& arguments);

/// `garm-provider-edge caches refresh NAME --config FILE`: every agent with the cache, of a
/// controller the config's client may act for, refreshes it now in the background. A line per
/// agent; exit codes as run_images.
Outcome run_caches(const std::vector<std::string>& arguments);

}  // namespace garm_edge::provider
