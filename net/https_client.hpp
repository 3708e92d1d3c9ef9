#pragma once

#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "net/peer_identity.hpp"
#include "net/tls_config.hpp"

namespace garm_edge::net {

/// A request that could not be completed: no connection, TLS refused, timed out, or an
/// answer that is not HTTP. The message says which step failed and where.
class HttpsError : public std::runtime_error {
 public:
  explicit HttpsError(const std::string& message, bool request_sent = true)
      : std::runtime_error(message), request_sent_(request_sent) {}
  /// False when no connection was made, so the request cannot have taken effect.
  bool request_sent() const noexcept { return request_sent_; }

 private:
  bool request_sent_;
};

struct HttpsTarget {
  std::string host;  // a DNS name in the agent's certificate (checked), or an address
  std::uint16_t port = 8443;
};

/// Parses "https://host[:port]" (no path). Throws HttpsError.
HttpsTarget parse_https_url(const std::string& url);

struct HttpsResponse {
  int status = 0;
  std::string body;
};

/// Why a peer's certificate is not the one a call expects; nothing when it is.
using PeerCheck = std::function<std::optional<std::string>(const PeerIdentity& peer)>;

struct HttpsClientOptions {
  std::chrono::milliseconds connect_timeout{std::chrono::seconds(5)};
  /// The whole exchange after connecting: handshake, request and response.
  std::chrono::milliseconds request_timeout{std::chrono::seconds(60)};
  /// Where the TLS session is kept between processes (0600); empty: no resumption.
  std::filesystem::path session_file;
  /// When set, no step runs past it, whatever the two timeouts above allow (a probe of many
  /// agents in parallel has one deadline for all).
  std::optional<std::chrono::steady_clock::time_point> deadline;
  /// Says why the verified peer is not the one asked for (its role or name, wire/identity.hpp),
  /// or nothing when it is: checked after the handshake, before anything is sent (one CA signs
  /// hosts, clients and the hub alike).
  PeerCheck check_peer = {};
};

/// One short exchange over mutual TLS: connect, handshake (resuming a saved session when it
/// can), send one request, read one response, close. Blocking, with deadlines on every step.
class HttpsClient {
 public:
  HttpsClient(HttpsTarget target, std::shared_ptr<const TlsConfig> tls, HttpsClientOptions options);

  HttpsResponse request(const std::string& method, const std::string& path,
                        const std::string& body = "");

 private:
  HttpsTarget target_;
  std::shared_ptr<const TlsConfig> tls_;
  HttpsClientOptions options_;
};

}  // namespace garm_edge::net
