#pragma once

// garm's agent mode (garm-contract §3): what the relay needs to know of garm-agent's socket.

#include <optional>
#include <string>
#include <string_view>

#include "agent/instances/instance_store.hpp"

namespace garm_edge::agent {

/// The instance name in a garm agent token, read as garm's agent middleware reads it: a JWT
/// whose claims say `is_agent: true` and name the instance. The signature is garm's to check
/// (the relay does not hold garm's secret); nothing for any other token.
std::optional<std::string> agent_token_instance(std::string_view token);

/// garm's agent URL as garm renders it into an install script (`AGENT_URL="…"`, or
/// `Get-AgentURL` in PowerShell) or runner metadata (`"agent_url": "…"`); nothing when the
/// text names none or names something that is not an http(s) or ws(s) URL.
std::optional<std::string> find_agent_url(std::string_view text);

/// Where the relay opens `guest`'s agent socket: the agent URL garm rendered for it, ws(s)
/// read as http(s), or (none seen) its callback URL's origin; `/agent` when the URL has no
/// path, as garm serves it there.
std::string upstream_agent_url(const GuestRecord& guest);

}  // namespace garm_edge::agent
