#pragma once

// What the guest service's endpoint files share; internal to agent/guests.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "agent/instances/instance_store.hpp"
#include "net/http_client.hpp"
#include "net/http_request.hpp"
#include "net/http_response.hpp"

namespace garm_edge::agent {

inline constexpr std::string_view kCallbacks = "/api/v1/callbacks";
inline constexpr std::string_view kMetadata = "/api/v1/metadata";
inline constexpr std::size_t kMaxMessages = 50;
/// Answers the relay reads or rewrites whole (scripts, runner metadata, errors); everything
/// else streams.
inline constexpr std::size_t kMaxWholeAnswerBytes = 4 * 1024 * 1024;
/// How long a streamed answer waits for the guest to take the pipe's contents.
inline constexpr std::chrono::seconds kMaxGuestStall{30};

net::HttpResponse service_unavailable();
bool is_one_of(std::string_view suffix, std::initializer_list<std::string_view> paths);
/// garm's answer as the guest gets it: status, content type, disposition; `body` or `stream`.
net::HttpResponse answer_for_guest(const net::ClientResponse& answer, std::string body,
                                   std::shared_ptr<net::BodyPipe> stream);
/// Go's default 404, so a probe learns nothing about which check failed.
net::HttpResponse not_found();
net::HttpResponse bad_gateway();
/// garm's own parsing of the header: split on single spaces, exactly two parts, take the
/// second (the scheme word is not checked).
std::optional<std::string> bearer_token(const net::HttpRequest& request);
/// Guest-supplied text made safe to store and log: UTF-8 without control characters, bounded.
std::string guest_text(const nlohmann::json& value, std::size_t max_bytes = 1024);
std::optional<std::int64_t> agent_id_of(const nlohmann::json& body);
/// garm's instance endpoints (garm-contract §3.3), each with or without a trailing slash.
/// Nothing else is forwarded: a guest must not reach garm's other routes through the relay.
bool is_garm_endpoint(bool callback, std::string_view suffix);
/// The record read after the index lookup still belongs to the same guest: the instance may
/// have been closed, or deleted and created again under its name, in between.
bool still_admits(const std::optional<InstanceRecord>& record, const std::string& token_hash,
                  std::string GuestRecord::*hash, const std::string& source_ip);
bool is_seed_file(std::string_view file);

/// The WebSocket headers of an upgrade, passed on as they are in `names` (lower case) from
/// `find`, under their usual spelling.
template <typename Find>
std::vector<std::pair<std::string, std::string>> websocket_headers(
    const Find& find, std::initializer_list<std::pair<std::string_view, std::string_view>> names) {
  std::vector<std::pair<std::string, std::string>> headers;
  for (const auto& [lower, spelled] : names) {
    if (const auto value = find(lower)) {
      headers.emplace_back(std::string(spelled), std::string(*value));
    }
  }
  return headers;
}

}  // namespace garm_edge::agent
