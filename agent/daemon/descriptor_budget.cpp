#include "agent/daemon/descriptor_budget.hpp"

#include <stdexcept>
#include <sys/resource.h>

#include "agent/api/control_api.hpp"
#include "agent/guests/agent_sockets.hpp"

namespace garm_edge::agent {
namespace {

/// libvirt's socket and event pipes, the state directory, the log, the archive downloads and
/// the listening sockets, with room to spare.
constexpr std::size_t kBaseDescriptors = 128;
/// Instances to count garm-agent sockets for when `max_instances` sets no bound: a /24 of
/// guest addresses.
constexpr std::size_t kAssumedInstances = 254;

}  // namespace

std::size_t descriptors_needed(const AgentConfig& config) {
  std::size_t needed = kBaseDescriptors;
  if (config.api.enabled) {
    const auto api = tls_server_options(config.api);
    needed += api.max_silent + api.max_handshakes + api.max_connections;
  }
  if (config.guests.enabled) {
    needed += 2 * config.guests.max_connections;
    // garm-agent's sockets leave the guest service's share once upgraded: each holds the
    // guest's connection and garm's.
    const auto bound = config.capacity.max_instances;
    const auto instances = bound > 0 ? bound : kAssumedInstances;
    needed += 2 * AgentSockets::Options{}.per_instance * instances;
  }
  return needed;
}

std::optional<std::uint64_t> soft_limit_for(std::uint64_t needed, std::uint64_t soft,
                                            std::uint64_t hard) {
  if (needed > hard) {
    return std::nullopt;
  }
  return std::max(needed, soft);
}

void ensure_descriptor_budget(const AgentConfig& config, Logger& log) {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) {
    return;  // nothing to check against
  }
  const std::uint64_t needed = descriptors_needed(config);
  auto soft = soft_limit_for(needed, limit.rlim_cur, limit.rlim_max);
  if (!soft) {
    // Still serves: every share evicts before it refuses, so a short limit means refused
    // connections under a flood, not a crash. It must be said loudly all the same.
    log.warning("the agent may need " + std::to_string(needed) +
                " file descriptors with this config (control API and guest connection limits), "
                "but the hard limit is " +
                std::to_string(limit.rlim_max) +
                ": raise LimitNOFILE= in the unit (or ulimit -Hn), or lower [api] "
                "max_connections and [guests] max_connections");
    soft = limit.rlim_max;
  }
  if (*soft != limit.rlim_cur) {
    limit.rlim_cur = *soft;
    if (::setrlimit(RLIMIT_NOFILE, &limit) != 0) {
      throw std::runtime_error("could not raise the soft file descriptor limit to " +
                               std::to_string(*soft));
    }
    log.info("file descriptor limit raised to " + std::to_string(*soft) + " (the config needs " +
             std::to_string(needed) + ")");
  }
}

}  // namespace garm_edge::agent
