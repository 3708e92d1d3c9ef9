#pragma once

// Internal to net/: one client connection to an upstream URL (garm's), shared by the request
// client (http_client.cpp) and the WebSocket tunnel (websocket_tunnel.cpp).

#include <optional>
#include <string>
#include <string_view>

#include "common/unique_fd.hpp"
#include "net/http_client.hpp"
#include "net/socket_io.hpp"

namespace garm_edge::net {

/// The byte stream to an upstream: TCP (through an HTTP proxy's CONNECT when one is set), with
/// TLS over it for https. Every step meets the current deadline (see set_deadline).
class UpstreamConnection {
 public:
  /// Connects and, for https, completes the handshake, checking the server against `trust`.
  /// Throws TransportError or HttpClientError.
  UpstreamConnection(const UpstreamUrl& url, const TlsConfig* trust,
                     const HttpClientOptions& options, const std::string& where);
  UpstreamConnection(const UpstreamConnection&) = delete;
  UpstreamConnection& operator=(const UpstreamConnection&) = delete;

  void write_all(std::string_view data);
  /// Bytes read, 0 when the peer closed the connection.
  std::size_t read_some(char* data, std::size_t size);
  /// Whether the end of the stream is the server's own: over TLS only a close_notify proves
  /// that; a bare TCP close could come from anyone on the path.
  bool end_is_authentic() const { return !tls_ || tls_->closed_cleanly(); }

  /// For a long-lived connection: each later step must finish by `deadline`.
  void set_deadline(SteadyClock::time_point deadline) { transport_.deadline = deadline; }
  /// The socket, to wait for input on (the connection keeps owning it).
  int fd() const { return socket_.get(); }
  /// Input already read from the socket but not yet returned (decrypted TLS records): a wait
  /// on fd() would not see it.
  bool has_buffered_input();

 private:
  /// HTTP CONNECT through the proxy, so TLS runs end to end with the URL's host.
  void open_tunnel(const UpstreamUrl& url, const UpstreamUrl& proxy);

  std::string where_;
  UniqueFd socket_;
  Transport transport_;  // the TLS session points at it: a connection never moves
  std::optional<TlsSession> tls_;
};

/// A status line for an error message: printable ASCII, bounded.
std::string printable_status_line(std::string_view head);

}  // namespace garm_edge::net
