#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "agent/base/config.hpp"
#include "agent/base/log.hpp"

namespace garm_edge::agent {

/// Descriptors the agent may hold at once with `config`: every connection share of the control
/// API and the guest service at its limit (each guest connection may hold a relay to garm
/// beside it), garm-agent's sockets (two descriptors each, per instance up to `max_instances`,
/// else 254), plus what libvirt, the state directory, downloads and the log take.
std::size_t descriptors_needed(const AgentConfig& config);

/// The soft RLIMIT_NOFILE to run with: `needed` when the hard limit allows it (never lower than
/// `soft`), or nothing when even the hard limit is short.
std::optional<std::uint64_t> soft_limit_for(std::uint64_t needed, std::uint64_t soft,
                                            std::uint64_t hard);

/// Raises the process's soft descriptor limit as far as the config needs, or to the hard limit
/// with a warning naming LimitNOFILE when the hard limit cannot hold every share (the agent
/// still serves: a full share evicts or refuses, it never crashes).
void ensure_descriptor_budget(const AgentConfig& config, Logger& log);

}  // namespace garm_edge::agent
