#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <asio.hpp>

#include "net/address_range.hpp"
#include "net/fair_share.hpp"
#include "net/http_request.hpp"
#include "net/http_response.hpp"
#include "net/tls_config.hpp"
#include "net/tls_stream.hpp"

namespace garm_edge::net {

struct TlsServerOptions {
  std::string address = "127.0.0.1";
  std::uint16_t port = 0;  // 0: any free port (see TlsServer::port)
  /// Only peers in these ranges are served; others are closed at accept, before any TLS work.
  /// Empty: anyone may connect (the client certificate still decides who is served).
  std::vector<AddressRange> allow;
  /// Connections accepted that have not sent a byte yet: they cost a descriptor and no TLS
  /// state. When all are taken, the oldest is closed for the newcomer.
  std::size_t max_silent = 1024;
  /// Connections in their handshake (no certificate shown yet), shared fairly among client
  /// addresses (see FairShare): a flood of stalled handshakes from a few addresses cannot keep
  /// anyone else out.
  std::size_t max_handshakes = 64;
  /// A handshake that made no step for this long is the first to go when all are taken.
  std::chrono::milliseconds handshake_stalled_after{std::chrono::seconds(2)};
  /// Connections past their handshake, shared fairly among client certificates: one client
  /// holding every idle connection loses the longest idle one to another client.
  std::size_t max_connections = 256;
  /// An idle connection waiting this long is the first to go when all are taken.
  std::chrono::milliseconds idle_evictable_after{std::chrono::seconds(5)};
  /// From accept to the client's first byte (a real client sends its ClientHello at once).
  std::chrono::milliseconds first_byte_timeout{std::chrono::seconds(3)};
  std::chrono::milliseconds handshake_timeout{std::chrono::seconds(10)};
  /// From the first byte of a request to its last: a slow client cannot hold a connection.
  std::chrono::milliseconds request_timeout{std::chrono::seconds(30)};
  /// Between requests on a keep-alive connection.
  std::chrono::milliseconds idle_timeout{std::chrono::seconds(60)};
  HttpLimits limits;
};

/// Connections closed to make room for others, by the stage they were in.
struct TlsServerEvictions {
  std::uint64_t silent = 0;
  std::uint64_t handshakes = 0;
  std::uint64_t established = 0;
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
  /// Serves an established session as if it had been accepted here: requests from its peer go
  /// to `handler` (not the server's), under this server's limits and deadlines. `on_closed`
  /// runs when the connection ends. For a connection this process dialed (an agent's tunnel to
  /// its hub); the server need not be started.
  void adopt(std::shared_ptr<TlsStream> stream, Handler handler, std::function<void()> on_closed);
  /// A new strand for a connection made elsewhere, to be adopted.
  asio::any_io_executor connection_executor() { return asio::make_strand(io_); }
  /// Stops accepting; connections in progress finish.
  void stop();
  std::size_t open_connections() const;
  /// Connections closed to make room for others (a sign of a flood or of too low limits).
  TlsServerEvictions evictions() const;
  /// Connections refused at accept because their address is not in `allow`.
  std::uint64_t refused_addresses() const { return refused_addresses_->load(); }

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
  /// The three stages a connection goes through, each with its own fair share.
  struct Shares {
    explicit Shares(const TlsServerOptions& options);
    FairShare silent;
    FairShare handshakes;
    FairShare established;
  };
  std::shared_ptr<Shares> shares_;
  std::shared_ptr<std::atomic<std::uint64_t>> refused_addresses_ =
      std::make_shared<std::atomic<std::uint64_t>>(0);
  std::shared_ptr<std::atomic<std::uint64_t>> generation_ =
      std::make_shared<std::atomic<std::uint64_t>>(0);
};

}  // namespace garm_edge::net
