#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <asio.hpp>

#include "net/handshake_budget.hpp"
#include "net/http_request.hpp"
#include "net/http_response.hpp"
#include "net/tls_config.hpp"

namespace garm_edge::net {

/// Who is on the other end, from the verified client certificate.
struct PeerIdentity {
  std::string common_name;
  std::vector<std::string> uri_names;  // URI subject alternative names
};

struct TlsServerOptions {
  std::string address = "127.0.0.1";
  std::uint16_t port = 0;  // 0: any free port (see TlsServer::port)
  std::size_t max_connections = 256;
  /// Connections still in their handshake (no certificate shown yet): kept well below
  /// max_connections so clients without a certificate cannot take every slot. When full, a
  /// silent or stalled one is evicted for a newcomer (see HandshakeBudget).
  std::size_t max_handshakes = 64;
  /// A client address's share of a full budget: beyond it, its newest evicts its oldest silent.
  std::size_t max_handshakes_per_peer = 16;
  /// From accept to the client's first byte (a real client sends its ClientHello at once).
  std::chrono::milliseconds first_byte_timeout{std::chrono::seconds(3)};
  std::chrono::milliseconds handshake_timeout{std::chrono::seconds(10)};
  /// From the first byte of a request to its last: a slow client cannot hold a connection.
  std::chrono::milliseconds request_timeout{std::chrono::seconds(30)};
  /// Between requests on a keep-alive connection.
  std::chrono::milliseconds idle_timeout{std::chrono::seconds(60)};
  HttpLimits limits;
};

/// HTTP/1.1 over mutual TLS (mbedTLS) on Asio. Every connection lives on its own strand;
/// handshakes and reads have deadlines; the handler answers through `respond`, from any thread.
class TlsServer {
 public:
  using Respond = std::function<void(HttpResponse)>;
  using Handler = std::function<void(HttpRequest, PeerIdentity, Respond)>;

  TlsServer(asio::io_context& io, TlsServerOptions options, std::shared_ptr<const TlsConfig> tls,
            Handler handler);
  ~TlsServer();
  TlsServer(const TlsServer&) = delete;
  TlsServer& operator=(const TlsServer&) = delete;

  /// Binds and starts accepting; throws on a bad address or a port in use.
  void start();
  std::uint16_t port() const;
  /// New connections use `tls`. Live ones stay open; before their next request the client's
  /// certificate is checked against the new CA and CRL, and one that fails gets 403 and is closed.
  void reload(std::shared_ptr<const TlsConfig> tls);
  /// Stops accepting; connections in progress finish.
  void stop();
  std::size_t open_connections() const;
  /// Handshakes evicted to make room for newer ones (a sign of a flood of silent connections).
  std::uint64_t handshake_evictions() const { return handshakes_->evictions(); }

  class Connection;

 private:
  void accept();
  std::shared_ptr<const TlsConfig> current_tls() const;

  asio::io_context& io_;
  TlsServerOptions options_;
  Handler handler_;
  asio::ip::tcp::acceptor acceptor_;
  asio::steady_timer accept_retry_;
  /// The current config, shared with connections (which may outlive the server).
  struct CurrentTls {
    std::mutex mutex;
    std::shared_ptr<const TlsConfig> tls;
    std::shared_ptr<const TlsConfig> get() {
      std::lock_guard lock(mutex);
      return tls;
    }
  };
  std::shared_ptr<CurrentTls> tls_ = std::make_shared<CurrentTls>();
  std::shared_ptr<std::atomic<std::size_t>> open_ = std::make_shared<std::atomic<std::size_t>>(0);
  std::shared_ptr<HandshakeBudget> handshakes_;
  std::shared_ptr<std::atomic<std::uint64_t>> generation_ =
      std::make_shared<std::atomic<std::uint64_t>>(0);
};

}  // namespace garm_edge::net
