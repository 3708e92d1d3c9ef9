#include "net/tls_server.hpp"

#include <algorithm>
#include <array>
#include <cerrno>
#include <sys/socket.h>

#include <mbedtls/net_sockets.h>

#include "net/accept_loop.hpp"
#include "net/http_server.hpp"
#include "net/socket_bio.hpp"

namespace garm_edge::net {
namespace {

using tcp = asio::ip::tcp;

}  // namespace

/// One client: handshake, then requests one after another (keep-alive), each answered before
/// the next is read. All of it runs on the socket's strand.
class TlsServer::Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(tcp::socket socket, std::shared_ptr<const TlsConfig> tls, TlsServerOptions options,
             Handler handler, std::shared_ptr<std::atomic<std::size_t>> open,
             std::shared_ptr<std::atomic<std::uint64_t>> generation,
             std::uint64_t started_generation, std::shared_ptr<Shares> shares,
             std::function<std::shared_ptr<const TlsConfig>()> current_tls)
      : socket_(std::move(socket)),
        timer_(socket_.get_executor()),
        tls_(std::move(tls)),
        options_(std::move(options)),
        handler_(std::move(handler)),
        parser_(options_.limits),
        open_(std::move(open)),
        generation_(std::move(generation)),
        started_generation_(started_generation),
        shares_(std::move(shares)),
        current_tls_(std::move(current_tls)) {
    ++*open_;
  }

  ~Connection() {
    if (on_closed_) {
      on_closed_();
    }
    shares_->silent.release(silent_ticket_);
    shares_->handshakes.release(handshake_ticket_);
    shares_->established.release(established_ticket_);
    --*open_;
  }

  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  /// Until its first byte a connection costs a descriptor and a silent slot, no TLS state.
  void start() {
    asio::error_code ignored;
    socket_.set_option(tcp::no_delay(true), ignored);  // no Nagle wait in the handshake
    socket_.non_blocking(true, ignored);
    peer_ = peer_key(socket_.remote_endpoint(ignored).address());
    const auto ticket = shares_->silent.admit(peer_, evictor(Stage::silent));
    if (!ticket) {
      return close();
    }
    silent_ticket_ = *ticket;
    arm_deadline(options_.first_byte_timeout);
    wait_for_first_byte();
  }

 private:
  /// Whom a connection's silent and handshake slots count against: its address, or for IPv6
  /// its /64 (one host's whole allocation, which an attacker can cycle through freely).
  static std::string peer_key(const asio::ip::address& address) {
    if (address.is_v6() && !address.to_v6().is_v4_mapped()) {
      auto bytes = address.to_v6().to_bytes();
      std::fill(bytes.begin() + 8, bytes.end(), 0);
      return asio::ip::address_v6(bytes).to_string() + "/64";
    }
    return address.is_v6()
               ? asio::ip::make_address_v4(asio::ip::v4_mapped, address.to_v6()).to_string()
               : address.to_string();
  }

  void wait_for_first_byte() {
    socket_.async_wait(
        tcp::socket::wait_read, [self = shared_from_this()](const asio::error_code& error) {
          if (error || self->stage_ != Stage::silent) {
            return self->close();
          }
          unsigned char byte = 0;
          const auto peeked = ::recv(self->socket_.native_handle(), &byte, 1, MSG_PEEK);
          if (peeked < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            return self->wait_for_first_byte();  // woken without data
          }
          if (peeked != 1) {
            return self->close();  // closed without a byte: no TLS work
          }
          self->begin_handshake();
        });
  }

  static int send(void* context, const unsigned char* data, std::size_t size) {
    return send_on_socket(static_cast<Connection*>(context)->socket_, data, size);
  }

  static int receive(void* context, unsigned char* data, std::size_t size) {
    return receive_on_socket(static_cast<Connection*>(context)->socket_, data, size);
  }

  /// mbedTLS asked to be called again once the socket is ready: wait, then run `next`.
  template <class Next>
  void wait_for(int want, Next next) {
    const auto direction =
        want == MBEDTLS_ERR_SSL_WANT_WRITE ? tcp::socket::wait_write : tcp::socket::wait_read;
    socket_.async_wait(direction, [self = shared_from_this(), next](const asio::error_code& error) {
      if (error) {
        return self->close();
      }
      next(*self);
    });
  }

  void arm_deadline(std::chrono::milliseconds timeout) {
    // A cancelled wait whose handler was already queued must not close the connection: only
    // the latest deadline counts.
    const auto epoch = ++deadline_epoch_;
    timer_.expires_after(timeout);
    timer_.async_wait([weak = weak_from_this(), epoch](const asio::error_code& error) {
      if (auto self = weak.lock(); self && !error && self->deadline_epoch_ == epoch) {
        self->close();  // a slow or silent client loses its connection, not a worker
      }
    });
  }

  void disarm_deadline() {
    ++deadline_epoch_;
    timer_.cancel();
  }

  enum class Stage { silent, handshake, established, closed };

  /// What a share runs to take this connection's slot: it closes the connection if it is still
  /// in `stage` and, once established, not answering a request. One whose request was handed
  /// to the handler since it was chosen is answered and then closed: the share no longer
  /// counts it.
  FairShare::Evict evictor(Stage stage) {
    return [weak = weak_from_this(), stage] {
      if (auto self = weak.lock()) {
        asio::post(self->socket_.get_executor(), [self, stage] {
          if (self->stage_ != stage) {
            return;
          }
          if (self->answering_) {
            self->keep_alive_ = false;
            self->evicted_ = true;
            return;
          }
          self->close();
        });
      }
    };
  }

  void begin_handshake() {
    shares_->silent.release(std::exchange(silent_ticket_, 0));
    const auto ticket = shares_->handshakes.admit(peer_, evictor(Stage::handshake));
    if (!ticket) {
      return close();  // every handshake slot holds live work of addresses at most its share
    }
    handshake_ticket_ = *ticket;
    stage_ = Stage::handshake;
    if (mbedtls_ssl_setup(ssl_.get(), tls_->ssl_config()) != 0) {
      return close();
    }
    mbedtls_ssl_set_bio(ssl_.get(), this, &Connection::send, &Connection::receive, nullptr);
    arm_deadline(options_.handshake_timeout);
    handshake();
  }

  void handshake() {
    const int rc = mbedtls_ssl_handshake(ssl_.get());
    if (ssl_->state != handshake_state_) {
      handshake_state_ = ssl_->state;  // a step forward: not a stalled handshake
      shares_->handshakes.progressed(handshake_ticket_);
    }
    if (wants_io(rc)) {
      return wait_for(rc, [](Connection& self) { self.handshake(); });
    }
    if (rc != 0) {
      return close();  // no, untrusted, expired or revoked certificate; old protocol; garbage
    }
    shares_->handshakes.release(std::exchange(handshake_ticket_, 0));
    // With client certificates optional (a hub's enrolment), one that failed verification
    // names nobody.
    if (mbedtls_ssl_get_verify_result(ssl_.get()) == 0) {
      identity_ = identity_of(mbedtls_ssl_get_peer_cert(ssl_.get()));
    }
    identity_.address = peer_;
    serve_established();
  }

 public:
  /// A session established elsewhere (see TlsServer::adopt): served from its first request on.
  void start_adopted(TlsStream& stream, std::function<void()> on_closed) {
    ssl_ = std::move(stream.ssl);
    mbedtls_ssl_set_bio(ssl_.get(), this, &Connection::send, &Connection::receive, nullptr);
    identity_ = std::move(stream.peer);
    pending_ = std::move(stream.early_bytes);
    on_closed_ = std::move(on_closed);
    asio::error_code ignored;
    socket_.set_option(tcp::no_delay(true), ignored);
    socket_.non_blocking(true, ignored);
    asio::post(socket_.get_executor(), [self = shared_from_this()] { self->serve_established(); });
  }

 private:
  void serve_established() {
    const auto ticket =
        shares_->established.admit(share_key(identity_), evictor(Stage::established));
    if (!ticket) {
      return close();  // every connection is busy with clients holding at most this one's share
    }
    established_ticket_ = *ticket;
    stage_ = Stage::established;
    arm_deadline(options_.idle_timeout);
    read_request();
  }

  static std::string share_key(const PeerIdentity& identity) {
    std::string key = identity.common_name;
    for (const auto& uri : identity.uri_names) {
      key += '\n' + uri;
    }
    return key;
  }

  /// A request went to the handler (its slot may not be taken) or was answered (it may again).
  /// Bytes of a request still arriving do not count: a client that sends one byte and stalls
  /// must not hold its slot for the whole request deadline.
  void set_answering(bool answering) {
    answering_ = answering;
    shares_->established.progressed(established_ticket_);
    shares_->established.set_evictable(established_ticket_, !answering);
  }

  void read_request() {
    while (true) {
      if (!pending_.empty() && feed_pending()) {
        return;  // a whole request (or a parse error) is being answered
      }
      std::array<unsigned char, 16 * 1024> buffer{};
      const int rc = mbedtls_ssl_read(ssl_.get(), buffer.data(), buffer.size());
      if (wants_io(rc)) {
        return wait_for(rc, [](Connection& self) { self.read_request(); });
      }
      if (rc <= 0) {
        return close();  // closed by the peer, or a TLS error
      }
      if (!request_started_) {
        request_started_ = true;
        arm_deadline(options_.request_timeout);
      }
      pending_.append(reinterpret_cast<const char*>(buffer.data()), static_cast<std::size_t>(rc));
    }
  }

  /// Feeds buffered bytes to the parser; true when it started answering.
  bool feed_pending() {
    auto parsed = parse_buffered(parser_, pending_);
    if (parsed.refusal) {
      keep_alive_ = false;
      set_answering(true);
      write_response(std::move(*parsed.refusal));
      return true;
    }
    if (!parsed.request) {
      return false;
    }
    auto request = std::move(*parsed.request);
    set_answering(true);
    keep_alive_ = request.keep_alive && !evicted_;
    disarm_deadline();
    if (!still_trusted()) {
      keep_alive_ = false;
      write_response(HttpResponse{
          .status = 403,
          .content_type = "application/json",
          .body = R"({"code":"forbidden","message":"the client certificate is no longer trusted"})",
          .headers = {}});
      return true;
    }
    auto respond = [self = shared_from_this()](HttpResponse response) {
      asio::post(self->socket_.get_executor(), [self, response = std::move(response)]() mutable {
        self->write_response(std::move(response));
      });
    };
    handler_(std::move(request), identity_, std::move(respond));
    return true;
  }

  /// After a reload (new CA or CRL), a live connection keeps working only while its client's
  /// certificate passes the new config: no dropped connections, and no revoked client served.
  bool still_trusted() {
    const auto generation = generation_->load();
    if (generation == started_generation_) {
      return true;
    }
    // With client certificates optional, a connection that names nobody was served as nobody
    // before the reload and is after it (a host enrolling while the hub's CRL changes).
    const bool anonymous = identity_.common_name.empty() && identity_.serial.empty();
    if (!anonymous && !current_tls_()->accepts(mbedtls_ssl_get_peer_cert(ssl_.get()))) {
      return false;
    }
    started_generation_ = generation;
    return true;
  }

  void write_response(HttpResponse response) {
    if (response.close_connection) {
      keep_alive_ = false;
    }
    take_over_ = std::move(response.take_over_tls);
    outgoing_ = serialize(response, keep_alive_, /*client_reads_chunked=*/true);
    written_ = 0;
    arm_deadline(options_.request_timeout);
    write();
  }

  void write() {
    while (written_ < outgoing_.size()) {
      const int rc = mbedtls_ssl_write(
          ssl_.get(), reinterpret_cast<const unsigned char*>(outgoing_.data()) + written_,
          outgoing_.size() - written_);
      if (wants_io(rc)) {
        return wait_for(rc, [](Connection& self) { self.write(); });
      }
      if (rc <= 0) {
        return close();
      }
      written_ += static_cast<std::size_t>(rc);
    }
    if (take_over_) {
      return hand_over();
    }
    if (!keep_alive_) {
      mbedtls_ssl_close_notify(ssl_.get());
      return close();
    }
    request_started_ = false;
    set_answering(false);
    arm_deadline(options_.idle_timeout);
    read_request();
  }

  /// The answer is out: the session, the socket and any bytes read past the request go to the
  /// taker, and this connection (with its slot) ends without closing them.
  void hand_over() {
    stage_ = Stage::closed;
    disarm_deadline();
    auto stream = std::make_shared<TlsStream>(TlsStream{.socket = std::move(socket_),
                                                        .tls = tls_,
                                                        .ssl = std::move(ssl_),
                                                        .peer = identity_,
                                                        .early_bytes = std::move(pending_)});
    mbedtls_ssl_set_bio(stream->ssl.get(), nullptr, nullptr, nullptr, nullptr);
    std::exchange(take_over_, nullptr)(std::move(stream));
  }

  void close() {
    stage_ = Stage::closed;
    asio::error_code ignored;
    disarm_deadline();
    if (socket_.is_open()) {
      socket_.shutdown(tcp::socket::shutdown_both, ignored);
      socket_.close(ignored);
    }
  }

  tcp::socket socket_;
  asio::steady_timer timer_;
  std::shared_ptr<const TlsConfig> tls_;  // keeps the config this session uses alive
  TlsServerOptions options_;              // copies: a connection may outlive the server's stop()
  Handler handler_;
  HttpRequestParser parser_;
  std::shared_ptr<std::atomic<std::size_t>> open_;
  SslContextPtr ssl_ = make_ssl_context();
  PeerIdentity identity_;
  std::function<void()> on_closed_;  // an adopted connection's owner hears of its end
  /// Set by the answer being written: the session goes there afterwards (see HttpResponse).
  std::function<void(std::shared_ptr<TlsStream>)> take_over_;
  std::string pending_;
  std::string outgoing_;
  std::size_t written_ = 0;
  bool keep_alive_ = true;
  bool request_started_ = false;
  bool answering_ = false;  // a request is with the handler or its answer is being written
  bool evicted_ = false;    // its slot was taken while it answered: closes after the answer
  std::uint64_t deadline_epoch_ = 0;
  std::shared_ptr<std::atomic<std::uint64_t>> generation_;
  std::uint64_t started_generation_ = 0;
  std::shared_ptr<Shares> shares_;
  std::string peer_;
  Stage stage_ = Stage::silent;
  FairShare::Ticket silent_ticket_ = 0;
  FairShare::Ticket handshake_ticket_ = 0;
  FairShare::Ticket established_ticket_ = 0;
  int handshake_state_ = MBEDTLS_SSL_HELLO_REQUEST;
  std::function<std::shared_ptr<const TlsConfig>()> current_tls_;
};

TlsServer::TlsServer(asio::io_context& io, TlsServerOptions options,
                     std::shared_ptr<const TlsConfig> tls, Handler handler)
    : io_(io),
      options_(std::move(options)),
      handler_(std::move(handler)),
      acceptor_(io),
      accept_retry_(io),
      tls_(std::make_shared<CurrentTls>()),
      shares_(std::make_shared<Shares>(options_)) {
  tls_->tls = std::move(tls);
}

TlsServer::Shares::Shares(const TlsServerOptions& options)
    : silent({.total = options.max_silent, .stalled_after = std::chrono::milliseconds(0)}),
      handshakes(
          {.total = options.max_handshakes, .stalled_after = options.handshake_stalled_after}),
      established(
          {.total = options.max_connections, .stalled_after = options.idle_evictable_after}) {}

TlsServer::~TlsServer() {
  stop();
}

void TlsServer::start() {
  listen_on(acceptor_, options_.address, options_.port);
  accept();
}

std::uint16_t TlsServer::port() const {
  return acceptor_.local_endpoint().port();
}

void TlsServer::reload(std::shared_ptr<const TlsConfig> tls) {
  {
    std::lock_guard lock(tls_->mutex);
    tls_->tls = std::move(tls);
  }
  ++*generation_;
}

std::shared_ptr<const TlsConfig> TlsServer::current_tls() const {
  return tls_->get();
}

void TlsServer::stop() {
  asio::error_code ignored;
  acceptor_.close(ignored);
  accept_retry_.cancel();
}

std::size_t TlsServer::open_connections() const {
  return open_->load();
}

TlsServerEvictions TlsServer::evictions() const {
  return {.silent = shares_->silent.evictions(),
          .handshakes = shares_->handshakes.evictions(),
          .established = shares_->established.evictions()};
}

void TlsServer::adopt(std::shared_ptr<TlsStream> stream, Handler handler,
                      std::function<void()> on_closed) {
  // Its TLS config is the one it was made with: checked again at the first reload after now.
  auto connection = std::make_shared<Connection>(
      std::move(stream->socket), stream->tls, options_, std::move(handler), open_, generation_,
      generation_->load(), shares_, [current = tls_] { return current->get(); });
  connection->start_adopted(*stream, std::move(on_closed));
}

void TlsServer::accept() {
  accept_connections(acceptor_, io_, accept_retry_, [this](tcp::socket& socket) {
    asio::error_code error;
    const auto peer = socket.remote_endpoint(error).address();
    if (error || !allowed(options_.allow, peer)) {
      ++*refused_addresses_;
      return false;
    }
    // The generation before the config: a reload in between makes the connection check its
    // client again, never skip a check it needs.
    const auto generation = generation_->load();
    std::make_shared<Connection>(std::move(socket), current_tls(), options_, handler_, open_,
                                 generation_, generation, shares_,
                                 [current = tls_] { return current->get(); })
        ->start();
    return true;
  });
}

}  // namespace garm_edge::net
