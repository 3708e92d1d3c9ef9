#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "net/http_client.hpp"
#include "net/tls_config.hpp"
#include "net/websocket_tunnel.hpp"

namespace garm_edge::agent {

/// The boundary to garm's instance-facing endpoints: callbacks, metadata and the agent socket.
class GarmRelay {
 public:
  virtual ~GarmRelay() = default;
  /// Sends `request` to `base_url` (garm's callback or metadata URL; `request.target` is the
  /// path below it) within `timeout`. HTTPS certificates are checked against `ca_bundle` (PEM,
  /// may be empty) and the system's CAs. `on_head` (may be null) sees the answer's head and
  /// may take its body. Throws net::HttpClientError.
  virtual net::ClientResponse forward(const std::string& base_url, const std::string& ca_bundle,
                                      net::ClientRequest request, std::chrono::milliseconds timeout,
                                      net::HeadHandler on_head) = 0;
  /// Sends a WebSocket upgrade to `url` (garm's agent URL) with `headers` and returns the
  /// tunnel with garm's answer. Certificates as for forward(). Throws net::HttpClientError.
  virtual std::unique_ptr<net::WebSocketTunnel> open_websocket(
      const std::string& url, const std::string& ca_bundle,
      const std::vector<std::pair<std::string, std::string>>& headers) = 0;
};

class HttpGarmRelay final : public GarmRelay {
 public:
  /// `options` bound connecting and (as request_timeout) the WebSocket upgrade; each forward
  /// has its own timeout.
  explicit HttpGarmRelay(net::HttpClientOptions options) : options_(options) {}

  net::ClientResponse forward(const std::string& base_url, const std::string& ca_bundle,
                              net::ClientRequest request, std::chrono::milliseconds timeout,
                              net::HeadHandler on_head) override;
  std::unique_ptr<net::WebSocketTunnel> open_websocket(
      const std::string& url, const std::string& ca_bundle,
      const std::vector<std::pair<std::string, std::string>>& headers) override;

  /// The largest body relayed: a garm-agent binary is tens of MB and passes through a pipe;
  /// bodies the relay reads whole have a lower bound of their own.
  static constexpr std::size_t kMaxBodyBytes = std::size_t{1} << 30;

 private:
  std::shared_ptr<const net::TlsConfig> trust_for(const net::UpstreamUrl& url,
                                                  const std::string& ca_bundle);

  net::HttpClientOptions options_;
  net::ClientTrustCache trust_;
};

}  // namespace garm_edge::agent
