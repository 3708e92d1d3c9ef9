#pragma once

namespace garm_edge::hub {

/// garm-edge-hub's command line: exit 0 on success, 1 on failure, 2 on a usage error.
int run_cli(int argc, char** argv);

}  // namespace garm_edge::hub
