#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "net/http_client.hpp"
#include "net/tls_config.hpp"

namespace garm_edge::net {

class UpstreamConnection;

/// A WebSocket a client opened through us, carried to an upstream byte for byte: the upgrade
/// request goes on with the client's own key, so the upstream's 101 answer (and every frame
/// after it) is the client's to check. Blocking, on a thread of its own.
class WebSocketTunnel {
 public:
  /// Connects to `url` (TLS for https, checked against `trust`), sends `GET target` with
  /// `headers` (the client's WebSocket and Authorization headers; Host, Connection and
  /// Upgrade are the tunnel's own and refused here) and reads the answer's head, and its body
  /// when it is not 101. Each step meets `options`' deadlines. Throws HttpClientError.
  WebSocketTunnel(const UpstreamUrl& url, const std::string& target,
                  const std::vector<std::pair<std::string, std::string>>& headers,
                  const HttpClientOptions& options, std::shared_ptr<const TlsConfig> trust);
  ~WebSocketTunnel();
  WebSocketTunnel(const WebSocketTunnel&) = delete;
  WebSocketTunnel& operator=(const WebSocketTunnel&) = delete;

  /// The upstream's answer: 101 (switched) with its headers, or a refusal with its body.
  const ClientResponse& answer() const { return answer_; }
  bool switched() const { return answer_.status == 101; }

  enum class End { client_closed, upstream_closed, idle, stopped, failed };
  /// After a 101: sends what each side sent early (`from_client`, and what the upstream sent
  /// after its head), then copies bytes both ways until either side closes, `idle` passes
  /// without a byte either way, a write stalls for `stall`, or `stop_fd` becomes readable.
  End splice(int client_fd, std::string from_client, std::chrono::milliseconds idle,
             std::chrono::milliseconds stall, int stop_fd);

 private:
  std::shared_ptr<const TlsConfig> trust_;  // the connection's TLS session points into it
  std::unique_ptr<UpstreamConnection> connection_;
  ClientResponse answer_;
  std::string early_bytes_;  // sent by the upstream after its 101 head
};

std::string_view to_string(WebSocketTunnel::End end);

}  // namespace garm_edge::net
