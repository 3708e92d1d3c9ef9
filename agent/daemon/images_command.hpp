#pragma once

#include <iosfwd>
#include <string>

#include "common/command_line.hpp"

namespace garm_edge::agent {

/// `garm-edge-agent images list|pull NAME|remove NAME --config FILE`: the images the agent
/// pulls, on this host's disk, whether the agent runs or not (a lock file keeps one pull of an
/// image at a time between them). Run as root for an agent with its own account, it works as
/// that account, so every file stays the agent's. Returns the exit code.
/// `image` is empty for list.
int images_command(const std::string& action, const std::string& image, const Options& options,
                   std::ostream& out);

}  // namespace garm_edge::agent
