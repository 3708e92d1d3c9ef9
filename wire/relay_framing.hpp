#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace garm_edge::wire {

/// A hub's answer to POST /v1/relay (one request to many agents): a first line naming the
/// format, then per agent a line "<name> <status> <sent> <length>\n" and <length> bytes: the
/// agent's body, or (status 0) why there is none, `sent` saying whether the request may have
/// reached the agent.
inline constexpr std::string_view kRelayFraming = "garm-edge-relay/1";
inline constexpr std::string_view kRelayContentType = "application/x-garm-edge-relay";

struct RelayedAnswer {
  std::string agent;
  int status = 0;  // 0: no answer; `body` says why
  bool sent = true;
  std::string body;
};

/// Nothing when `framed` is not whole and well formed.
std::optional<std::vector<RelayedAnswer>> parse_relay_framing(std::string_view framed);

}  // namespace garm_edge::wire
