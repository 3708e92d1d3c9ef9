#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <asio.hpp>

#include "net/fair_share.hpp"
#include "net/http_request.hpp"
#include "net/http_response.hpp"

namespace garm_edge::net {

struct HttpServerOptions {
  std::string address = "127.0.0.1";
  std::uint16_t port = 0;  // 0: any free port (see HttpServer::port)
  /// Shared fairly among client addresses (see FairShare): when all are taken, a newcomer
  /// takes the longest idle connection of the address holding the most.
  std::size_t max_connections = 256;
  /// Per client address, so one client cannot take every slot.
  std::size_t max_connections_per_peer = 16;
  /// A connection waiting this long for its next request is the first to go when all are taken.
  std::chrono::milliseconds idle_evictable_after{std::chrono::seconds(2)};
  /// When set, connections from addresses it refuses are closed at accept, before any read.
  std::function<bool(const asio::ip::address&)> admit_address;
  /// From the first byte of a request to its last: a slow client cannot hold a connection.
  std::chrono::milliseconds request_timeout{std::chrono::seconds(10)};
  /// Between requests on a keep-alive connection, and before the first one.
  std::chrono::milliseconds idle_timeout{std::chrono::seconds(30)};
  /// Writing one response.
  std::chrono::milliseconds write_timeout{std::chrono::seconds(30)};
  HttpLimits limits;
};

/// Plain HTTP/1.1 on Asio, for clients that cannot present a certificate (guests at first
/// boot). Each connection lives on its own strand; reads and writes have deadlines; the handler
/// gets the peer's address from the socket (never from headers) and answers through `respond`,
/// from any thread.
class HttpServer {
 public:
  using Respond = std::function<void(HttpResponse)>;
  using Handler = std::function<void(HttpRequest, std::string peer_address, Respond)>;

  HttpServer(asio::io_context& io, HttpServerOptions options, Handler handler);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  /// Binds and starts accepting; throws on a bad address or a port in use.
  void start();
  std::uint16_t port() const;
  /// Stops accepting; connections in progress finish.
  void stop();
  /// Once the event loop has stopped, no connection reads its streamed answer any more: this
  /// tells their writers, which would otherwise wait for a reader until their own deadline,
  /// and those of answers still to come.
  void abandon_streams();
  std::size_t open_connections() const { return open_->load(); }
  /// Idle connections closed to make room for another address's.
  std::uint64_t evictions() const { return share_->evictions(); }
  /// Connections closed at accept: their address was refused, or held its share.
  std::uint64_t refused() const { return refused_->load(); }

  class Connection;

 private:
  void accept();

  asio::io_context& io_;
  HttpServerOptions options_;
  Handler handler_;
  asio::ip::tcp::acceptor acceptor_;
  asio::steady_timer accept_retry_;
  std::shared_ptr<std::atomic<std::size_t>> open_ = std::make_shared<std::atomic<std::size_t>>(0);
  /// Open connections per client address, shared with the connections that decrement them.
  struct PeerCounts {
    std::mutex mutex;
    std::map<std::string, std::size_t> open;
  };
  std::shared_ptr<PeerCounts> peers_ = std::make_shared<PeerCounts>();
  std::shared_ptr<FairShare> share_;
  std::shared_ptr<std::atomic<std::uint64_t>> refused_ =
      std::make_shared<std::atomic<std::uint64_t>>(0);
  /// The pipes of streamed answers, shared with the connections that add theirs (as their
  /// handler answers, before the event loop sees the answer).
  struct LiveStreams {
    std::mutex mutex;
    bool abandoned = false;  // then a pipe added later is abandoned at once
    std::vector<std::weak_ptr<BodyPipe>> pipes;
    void add(const std::shared_ptr<BodyPipe>& pipe);
  };
  std::shared_ptr<LiveStreams> streams_ = std::make_shared<LiveStreams>();
};

/// What buffered bytes make: nothing yet, a refusal to send before closing (400, 413, 431, 501,
/// 505), or a whole request. Consumed bytes leave `pending`.
struct ParsedRequest {
  std::optional<HttpResponse> refusal;
  std::optional<HttpRequest> request;
};
ParsedRequest parse_buffered(HttpRequestParser& parser, std::string& pending);

}  // namespace garm_edge::net
