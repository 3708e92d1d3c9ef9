#include "agent/guests/garm_agent.hpp"

#include <algorithm>
#include <array>

#include <nlohmann/json.hpp>

#include "net/http_client.hpp"
#include "wire/base64.hpp"
#include "wire/json_fields.hpp"

namespace garm_edge::agent {
namespace {

constexpr std::size_t kMaxUrlBytes = 2048;

/// base64url without padding, as JWTs write their parts.
std::optional<std::string> base64url_decode(std::string_view text) {
  std::string standard(text);
  std::replace(standard.begin(), standard.end(), '-', '+');
  std::replace(standard.begin(), standard.end(), '_', '/');
  if (standard.find_first_of("=\r\n") != std::string::npos) {
    return std::nullopt;
  }
  standard.append((4 - standard.size() % 4) % 4, '=');
  return wire::base64_decode(standard);
}

/// ws:// and wss:// as the http(s) URLs their handshakes use.
std::string as_http(std::string_view url) {
  if (url.starts_with("ws://") || url.starts_with("wss://")) {
    return "http" + std::string(url.substr(2));
  }
  return std::string(url);
}

bool is_usable_url(std::string_view url) {
  if (url.empty() || url.size() > kMaxUrlBytes) {
    return false;
  }
  try {
    net::parse_upstream_url(as_http(url));
    return true;
  } catch (const net::HttpClientError&) {
    return false;
  }
}

/// The double-quoted value that starts right after `key` and the characters in `between`.
std::optional<std::string_view> quoted_after(std::string_view text, std::string_view key,
                                             std::string_view between) {
  for (auto at = text.find(key); at != std::string_view::npos; at = text.find(key, at + 1)) {
    auto rest = text.substr(at + key.size());
    const auto open = rest.find_first_not_of(between);
    if (open == std::string_view::npos || rest[open] != '"') {
      continue;
    }
    rest.remove_prefix(open + 1);
    const auto close = rest.find_first_of("\"\\\n");
    if (close != std::string_view::npos && rest[close] == '"') {
      return rest.substr(0, close);
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::string> agent_token_instance(std::string_view token) {
  const auto first = token.find('.');
  const auto second = token.find('.', first == std::string_view::npos ? first : first + 1);
  if (first == std::string_view::npos || second == std::string_view::npos || token.size() > 8192) {
    return std::nullopt;
  }
  const auto payload = base64url_decode(token.substr(first + 1, second - first - 1));
  if (!payload || !wire::json_depth_within(*payload)) {
    return std::nullopt;
  }
  const auto claims = nlohmann::json::parse(*payload, nullptr, false);
  if (!claims.is_object()) {
    return std::nullopt;
  }
  const auto is_agent = claims.find("is_agent");
  const auto name = claims.find("name");
  if (is_agent == claims.end() || !is_agent->is_boolean() || !is_agent->get<bool>() ||
      name == claims.end() || !name->is_string() || name->get<std::string>().empty()) {
    return std::nullopt;
  }
  return name->get<std::string>();
}

std::optional<std::string> find_agent_url(std::string_view text) {
  const std::array<std::pair<std::string_view, std::string_view>, 3> forms = {{
      {"AGENT_URL=", ""},                   // garm's Linux templates
      {"\"agent_url\"", " \t:"},            // runner metadata (JSON)
      {"Get-AgentURL {", " \t\r\nreturn"},  // garm's Windows templates
  }};
  for (const auto& [key, between] : forms) {
    if (const auto url = quoted_after(text, key, between); url && is_usable_url(*url)) {
      return std::string(*url);
    }
  }
  return std::nullopt;
}

std::string upstream_agent_url(const GuestRecord& guest) {
  std::string url;
  if (!guest.garm_agent_url.empty()) {
    url = as_http(guest.garm_agent_url);
  } else {
    const auto scheme_end = guest.callback_url.find("://");
    const auto path_start =
        guest.callback_url.find('/', scheme_end == std::string::npos ? 0 : scheme_end + 3);
    url = guest.callback_url.substr(0, path_start);
  }
  while (url.ends_with('/')) {
    url.pop_back();
  }
  const auto authority = url.find("://");
  if (authority != std::string::npos && url.find('/', authority + 3) == std::string::npos) {
    url += "/agent";
  }
  return url;
}

}  // namespace garm_edge::agent
