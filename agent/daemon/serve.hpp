#pragma once

#include <functional>
#include <string>

#include "agent/base/config.hpp"
#include "agent/base/log.hpp"

namespace garm_edge::agent {

/// Runs the agent: reconciles, then serves the control API over mutual TLS until SIGINT or
/// SIGTERM; SIGHUP reloads certificates, key, CA and CRL without dropping connections.
/// `on_listening` gets the bound port (tests listen on port 0). Returns the exit code.
int serve(const AgentConfig& config, Logger& log,
          const std::function<void(unsigned short)>& on_listening = {});

}  // namespace garm_edge::agent
