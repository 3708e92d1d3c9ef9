#include "provider/agent_client.hpp"

#include <cctype>
#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include "common/hex.hpp"
#include "common/text.hpp"
#include "wire/identity.hpp"
#include "wire/join_token.hpp"
#include "wire/json_fields.hpp"

namespace garm_edge::provider {

net::HttpsResponse AgentClient::call(
    const std::string& method, const std::string& path, const std::string& body, CallKind kind,
    std::optional<std::chrono::steady_clock::time_point> deadline) {
  const auto where = "agent " + endpoint_.name + " (" + endpoint_.url + "): ";
  {
    std::unique_lock lock(prefetched_mutex_);
    if (prefetched_ && prefetched_->method == method && prefetched_->path == path) {
      auto taken = std::move(*prefetched_);
      prefetched_.reset();
      lock.unlock();
      // Failed before the agent saw it, with another hub process to ask: asked below.
      const bool elsewhere =
          !endpoint_.other_hub_urls.empty() &&
          (taken.response ? error_code_of(*taken.response) == "agent_not_connected"
                          : !taken.request_sent);
      if (!elsewhere) {
        if (!taken.response) {
          throw net::HttpsError(where + "hub " + endpoint_.hub + ": " + taken.error,
                                taken.request_sent);
        }
        if (!endpoint_.hub.empty() && taken.response->status == 502) {
          throw_hub_failure(*taken.response);
        }
        reached_ = true;
        return std::move(*taken.response);
      }
    }
  }
  // Another process of the same hub only while nothing was sent: nothing may run twice.
  std::vector<std::string> urls{endpoint_.url};
  urls.insert(urls.end(), endpoint_.other_hub_urls.begin(), endpoint_.other_hub_urls.end());
  for (std::size_t i = 0;; ++i) {
    try {
      auto response = call_at(urls[i], method, path, body, kind, deadline);
      reached_ = true;
      return response;
    } catch (const net::HttpsError& e) {
      if (e.request_sent() || i + 1 == urls.size()) {
        throw net::HttpsError(where + e.what(), e.request_sent());
      }
    } catch (const std::exception& e) {  // certificates that cannot be loaded
      throw net::HttpsError(where + e.what(), false);
    }
  }
}

net::HttpsResponse AgentClient::call_at(
    const std::string& url, const std::string& method, const std::string& path,
    const std::string& body, CallKind kind,
    std::optional<std::chrono::steady_clock::time_point> deadline) const {
  auto options =
      call_options(config_, kind, deadline,
                   endpoint_.hub.empty() ? endpoint_.name : hub_session_name(endpoint_.hub, url));
  options.check_peer = expected_peer(endpoint_);
  auto response = net::HttpsClient(net::parse_https_url(url), tls_.get(endpoint_), options)
                      .request(method, endpoint_.path_prefix + path, body);
  if (!endpoint_.hub.empty() && response.status == 502) {
    throw_hub_failure(response);
  }
  return response;
}

void AgentClient::prefetched(const std::string& method, const std::string& path,
                             net::HttpsResponse response) {
  std::lock_guard lock(prefetched_mutex_);
  prefetched_ = Prefetched{.method = method,
                           .path = path,
                           .response = std::move(response),
                           .error = "",
                           .request_sent = true};
}

void AgentClient::prefetch_failed(const std::string& method, const std::string& path,
                                  std::string error, bool request_sent) {
  std::lock_guard lock(prefetched_mutex_);
  prefetched_ = Prefetched{.method = method,
                           .path = path,
                           .response = std::nullopt,
                           .error = std::move(error),
                           .request_sent = request_sent};
}

bool AgentClient::has_prefetched(const std::string& method, const std::string& path) {
  std::lock_guard lock(prefetched_mutex_);
  return prefetched_ && prefetched_->method == method && prefetched_->path == path;
}

void AgentClient::throw_hub_failure(const net::HttpsResponse& response) const {
  const auto code = error_code_of(response);
  if (code == "agent_not_connected") {
    // The hub had no tunnel to give it: the agent never saw the request.
    throw net::HttpsError("hub " + endpoint_.hub + ": " + describe(response), false);
  }
  if (code == "agent_unreachable") {
    throw net::HttpsError("hub " + endpoint_.hub + ": " + describe(response), true);
  }
}

std::string hub_session_name(const std::string& hub, const std::string& url) {
  std::string name = "hub-" + hub + "-";
  for (const char c : url.substr(std::min(url.size(), std::string_view("https://").size()))) {
    name += std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '.' || c == '-' ? c : '_';
  }
  return name;
}

net::HttpsClientOptions call_options(const ProviderConfig& config, CallKind kind,
                                     std::optional<std::chrono::steady_clock::time_point> deadline,
                                     const std::string& session_name) {
  net::HttpsClientOptions options;
  options.connect_timeout = config.connect_timeout;
  options.request_timeout =
      kind == CallKind::create ? config.create_timeout : config.request_timeout;
  options.deadline = deadline;
  if (!config.session_dir.empty()) {
    // Private to garm's user; a directory that cannot be made just means full handshakes.
    ::mkdir(config.session_dir.c_str(), 0700);
    options.session_file = config.session_dir / (session_name + ".tls-session");
  }
  return options;
}

std::shared_ptr<const net::TlsConfig> TlsConfigCache::get(const AgentEndpoint& endpoint) {
  const std::lock_guard lock(mutex_);
  auto& config = configs_[{endpoint.ca, endpoint.certificate, endpoint.key, endpoint.crl}];
  if (!config) {
    config =
        net::TlsConfig::load(net::TlsConfig::Role::client, {.ca = endpoint.ca,
                                                            .crl = endpoint.crl,
                                                            .certificate = endpoint.certificate,
                                                            .key = endpoint.key});
  }
  return config;
}

net::PeerCheck hub_peer() {
  return [](const net::PeerIdentity& peer) {
    return wire::refusal_as_hub(peer.uri_names, peer.common_name);
  };
}

net::PeerCheck expected_peer(const AgentEndpoint& endpoint) {
  if (!endpoint.hub.empty()) {
    return hub_peer();
  }
  return [name = endpoint.name,
          required = endpoint.require_host_identity](const net::PeerIdentity& peer) {
    return wire::refusal_as_host(peer.uri_names, peer.common_name, name, required);
  };
}

std::string AgentClient::describe(const net::HttpsResponse& response) const {
  std::string message = "HTTP " + std::to_string(response.status);
  try {
    const auto body = wire::parse_json_text(response.body, "agent answer");
    if (body.is_object()) {
      // An agent's words reach garm's log: one line of printable text each.
      message = printable_excerpt(body.value("message", message), 1024) + " (" +
                printable_excerpt(body.value("code", std::string("error")), 64) + ", HTTP " +
                std::to_string(response.status) + ")";
    }
  } catch (const std::exception&) {
  }
  return "agent " + endpoint_.name + ": " + message;
}

std::string error_code_of(const net::HttpsResponse& response) {
  try {
    const auto body = wire::parse_json_text(response.body, "agent answer");
    if (body.is_object() && body.contains("code") && body["code"].is_string()) {
      return body["code"].get<std::string>();
    }
  } catch (const std::exception&) {
  }
  return "";
}

std::string percent_encode(const std::string& segment) {
  std::string out;
  for (const char c : segment) {
    const auto byte = static_cast<unsigned char>(c);
    const bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                       c == '-' || c == '.' || c == '_' || c == '~';
    if (plain) {
      out += c;
    } else {
      out += '%';
      append_hex(out, byte, HexCase::upper);  // RFC 3986 2.1
    }
  }
  return out;
}

}  // namespace garm_edge::provider
