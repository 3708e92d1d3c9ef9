#pragma once

#include <iosfwd>
#include <string>

#include "common/command_line.hpp"

namespace garm_edge::agent {

/// `garm-edge-agent caches list|refresh NAME --config FILE` (docs/caches.md): asks the running
/// agent. Without one, `list` reads the caches' records on disk and `refresh` is refused: a
/// refresh boots a builder guest, which only the agent does. Returns the exit code.
int caches_command(const std::string& action, const std::string& cache, const Options& options,
                   std::ostream& out);

}  // namespace garm_edge::agent
