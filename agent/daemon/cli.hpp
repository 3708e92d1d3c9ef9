#pragma once

namespace garm_edge::agent {

/// The garm-edge-agent command line: parses argv and runs one command; returns the exit code.
int run_cli(int argc, char** argv);

}  // namespace garm_edge::agent
