#include "net/http_server.hpp"

#include <array>
#include <cstdio>
#include <fcntl.h>
#include <unistd.h>

#include "net/accept_loop.hpp"

namespace garm_edge::net {
namespace {

using tcp = asio::ip::tcp;

}  // namespace

ParsedRequest parse_buffered(HttpRequestParser& parser, std::string& pending) {
  std::size_t consumed = 0;
  const auto result = parser.feed(pending, consumed);
  pending.erase(0, consumed);
  if (result == HttpRequestParser::Result::error) {
    return {.refusal = HttpResponse{.status = parser.error_status(),
                                    .content_type = "application/json",
                                    .body = R"({"code":"bad_request","message":")" +
                                            parser.error_reason() + "\"}",
                                    .headers = {}},
            .request = std::nullopt};
  }
  if (result == HttpRequestParser::Result::complete) {
    return {.refusal = std::nullopt, .request = parser.take()};
  }
  return {};
}

/// One client: requests one after another (keep-alive), each answered before the next is read.
class HttpServer::Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(tcp::socket socket, std::string peer, const HttpServerOptions& options,
             Handler handler, std::shared_ptr<std::atomic<std::size_t>> open,
             std::shared_ptr<PeerCounts> peers, std::shared_ptr<LiveStreams> streams,
             std::shared_ptr<FairShare> share)
      : socket_(std::move(socket)),
        timer_(socket_.get_executor()),
        options_(options),
        handler_(std::move(handler)),
        parser_(options_.limits),
        open_(std::move(open)),
        peers_(std::move(peers)),
        streams_(std::move(streams)),
        share_(std::move(share)),
        peer_(std::move(peer)) {
    ++*open_;
  }
  ~Connection() {
    if (stream_) {
      stream_->abandon();
    }
    --*open_;
    share_->release(ticket_);
    std::lock_guard lock(peers_->mutex);
    if (const auto it = peers_->open.find(peer_); it != peers_->open.end() && --it->second == 0) {
      peers_->open.erase(it);
    }
  }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  /// False when every connection holds live work of addresses at most this one's share.
  bool start() {
    const auto ticket = share_->admit(peer_, [weak = weak_from_this()] {
      if (auto self = weak.lock()) {
        asio::post(self->socket_.get_executor(), [self] {
          if (self->answering_) {       // a request handed over since it was chosen is answered,
            self->keep_alive_ = false;  // then the connection closes: the share lost count of it
            self->evicted_ = true;
            return;
          }
          self->close();
        });
      }
    });
    if (!ticket) {
      return false;
    }
    ticket_ = *ticket;
    arm_deadline(options_.idle_timeout);
    read_request();
    return true;
  }

 private:
  /// A request went to the handler (its slot may not be taken) or was answered (it may again);
  /// bytes of a request still arriving do not count.
  void set_answering(bool answering) {
    answering_ = answering;
    share_->progressed(ticket_);
    share_->set_evictable(ticket_, !answering);
  }

  void arm_deadline(std::chrono::milliseconds timeout) {
    // Only the latest deadline counts: a cancelled wait may already be queued.
    const auto epoch = ++deadline_epoch_;
    timer_.expires_after(timeout);
    timer_.async_wait([weak = weak_from_this(), epoch](const asio::error_code& error) {
      if (auto self = weak.lock(); self && !error && self->deadline_epoch_ == epoch) {
        self->close();
      }
    });
  }

  void read_request() {
    if (!pending_.empty() && feed_pending()) {
      return;
    }
    socket_.async_read_some(
        asio::buffer(buffer_),
        [self = shared_from_this()](const asio::error_code& error, std::size_t got) {
          if (error) {
            return self->close();
          }
          if (!self->request_started_) {
            self->request_started_ = true;
            self->arm_deadline(self->options_.request_timeout);
          }
          self->pending_.append(self->buffer_.data(), got);
          self->read_request();
        });
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
    client_reads_chunked_ = request.minor_version >= 1;
    ++deadline_epoch_;  // the handler may take its time (a relay); the write has its own deadline
    timer_.cancel();
    auto respond = [self = shared_from_this()](HttpResponse response) {
      if (response.stream) {
        // Known before the post: the event loop may have stopped, and then only
        // abandon_streams() can free the writer.
        self->streams_->add(response.stream);
      }
      asio::post(self->socket_.get_executor(), [self, response = std::move(response)]() mutable {
        self->write_response(std::move(response));
      });
    };
    handler_(std::move(request), peer_, std::move(respond));
    return true;
  }

  void write_response(HttpResponse response) {
    if (response.close_connection || (response.stream && !client_reads_chunked_)) {
      keep_alive_ = false;  // an HTTP/1.0 client knows the body's end by the close
    }
    outgoing_ = serialize(response, keep_alive_, client_reads_chunked_);
    if (response.upgrade) {
      return write_upgrade(std::move(response.upgrade));
    }
    file_ = std::move(response.file);
    file_offset_ = 0;
    stream_ = std::move(response.stream);
    write_outgoing();
  }

  /// The 101 head, then the socket goes to `upgrade` (as a descriptor of its own: the asio
  /// socket closes with this connection).
  void write_upgrade(std::function<void(UniqueFd, std::string)> upgrade) {
    arm_deadline(options_.write_timeout);
    asio::async_write(socket_, asio::buffer(outgoing_),
                      [self = shared_from_this(), upgrade = std::move(upgrade)](
                          const asio::error_code& error, std::size_t) {
                        ++self->deadline_epoch_;
                        self->timer_.cancel();
                        if (error) {
                          return self->close();
                        }
                        // release() takes it out of asio's epoll set; a dup would leave it
                        // registered.
                        asio::error_code released;
                        UniqueFd socket(self->socket_.release(released));
                        if (!released && socket.get() >= 0) {
                          upgrade(std::move(socket), std::exchange(self->pending_, {}));
                        }
                      });
  }

  /// Writes outgoing_, then the file body piece by piece (each piece with its own deadline, so
  /// a slow but moving client finishes a large download), then waits for the next request.
  void write_outgoing() {
    arm_deadline(options_.write_timeout);
    asio::async_write(socket_, asio::buffer(outgoing_),
                      [self = shared_from_this()](const asio::error_code& error, std::size_t) {
                        if (error) {
                          return self->close();
                        }
                        if (self->file_ && self->file_offset_ < self->file_->size) {
                          return self->next_file_piece();
                        }
                        if (self->stream_ && !self->stream_ended_) {
                          return self->next_stream_piece();
                        }
                        self->file_.reset();
                        self->stream_.reset();
                        self->stream_ended_ = false;
                        if (!self->keep_alive_) {
                          return self->close();
                        }
                        self->request_started_ = false;
                        self->set_answering(false);
                        self->arm_deadline(self->options_.idle_timeout);
                        self->read_request();
                      });
  }

  void next_file_piece() {
    constexpr std::size_t kPiece = 256 * 1024;
    // At most kPiece, so it fits a 32-bit size_t too.
    const auto wanted =
        static_cast<std::size_t>(std::min<std::uint64_t>(kPiece, file_->size - file_offset_));
    outgoing_.resize(wanted);
    const auto got =
        ::pread(file_->fd.get(), outgoing_.data(), wanted, static_cast<off_t>(file_offset_));
    if (got <= 0) {
      return close();  // the file shrank or failed: the client sees a short body
    }
    outgoing_.resize(static_cast<std::size_t>(got));
    file_offset_ += static_cast<std::uint64_t>(got);
    write_outgoing();
  }

  /// Waits (without a deadline: the writer has its own) for the next piece of a piped body.
  void next_stream_piece() {
    ++deadline_epoch_;
    timer_.cancel();
    stream_->read([self = shared_from_this()](BodyPipe::Piece piece) {
      asio::post(self->socket_.get_executor(), [self, piece = std::move(piece)]() mutable {
        self->write_stream_piece(std::move(piece));
      });
    });
  }

  void write_stream_piece(BodyPipe::Piece piece) {
    outgoing_.clear();
    if (!client_reads_chunked_) {
      outgoing_ = std::move(piece.data);
    } else if (!piece.data.empty()) {
      std::array<char, 20> size{};
      std::snprintf(size.data(), size.size(), "%zx\r\n", piece.data.size());
      outgoing_ = size.data() + std::move(piece.data) + "\r\n";
    }
    if (piece.end && !piece.complete) {
      // Cut off upstream: what arrived goes out, then the connection ends without the last
      // chunk, which the client reads as a truncated body. An HTTP/1.0 client has no chunks:
      // it gets a reset instead of a clean end, so it cannot take the half for the whole.
      stream_->abandon();
      return asio::async_write(socket_, asio::buffer(outgoing_),
                               [self = shared_from_this()](const asio::error_code&, std::size_t) {
                                 self->client_reads_chunked_ ? self->close() : self->reset();
                               });
    }
    if (piece.end) {
      outgoing_ += client_reads_chunked_ ? "0\r\n\r\n" : "";
      stream_ended_ = true;
    }
    write_outgoing();
  }

  /// Ends the connection with a reset (no FIN): the client sees an error, not an end of body.
  void reset() {
    asio::error_code ignored;
    socket_.set_option(asio::socket_base::linger(true, 0), ignored);
    socket_.close(ignored);
    close();
  }

  void close() {
    if (stream_) {
      stream_->abandon();
    }
    asio::error_code ignored;
    ++deadline_epoch_;
    timer_.cancel();
    socket_.shutdown(tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);
  }

  tcp::socket socket_;
  asio::steady_timer timer_;
  HttpServerOptions options_;  // a copy: a connection may outlive the server's stop()
  Handler handler_;
  HttpRequestParser parser_;
  std::shared_ptr<std::atomic<std::size_t>> open_;
  std::shared_ptr<PeerCounts> peers_;
  std::shared_ptr<LiveStreams> streams_;
  std::shared_ptr<FairShare> share_;
  FairShare::Ticket ticket_ = 0;
  std::string peer_;
  std::array<char, 16 * 1024> buffer_{};
  std::string pending_;
  std::string outgoing_;
  std::shared_ptr<FileBody> file_;
  std::uint64_t file_offset_ = 0;
  std::shared_ptr<BodyPipe> stream_;
  bool stream_ended_ = false;
  bool keep_alive_ = true;
  bool client_reads_chunked_ = true;
  bool request_started_ = false;
  bool answering_ = false;  // a request is with the handler or its answer is being written
  bool evicted_ = false;    // its slot was taken while it answered: closes after the answer
  std::uint64_t deadline_epoch_ = 0;
};

HttpServer::HttpServer(asio::io_context& io, HttpServerOptions options, Handler handler)
    : io_(io),
      options_(std::move(options)),
      handler_(std::move(handler)),
      acceptor_(io),
      accept_retry_(io),
      share_(std::make_shared<FairShare>(FairShare::Limits{
          .total = options_.max_connections, .stalled_after = options_.idle_evictable_after})) {}

HttpServer::~HttpServer() {
  stop();
}

void HttpServer::start() {
  listen_on(acceptor_, options_.address, options_.port);
  accept();
}

std::uint16_t HttpServer::port() const {
  return acceptor_.local_endpoint().port();
}

void HttpServer::stop() {
  asio::error_code ignored;
  acceptor_.close(ignored);
  accept_retry_.cancel();
}

void HttpServer::abandon_streams() {
  std::lock_guard lock(streams_->mutex);
  streams_->abandoned = true;
  for (const auto& pipe : streams_->pipes) {
    if (const auto live = pipe.lock()) {
      live->abandon();
    }
  }
  streams_->pipes.clear();
}

void HttpServer::LiveStreams::add(const std::shared_ptr<BodyPipe>& pipe) {
  std::lock_guard lock(mutex);
  if (abandoned) {
    pipe->abandon();
    return;
  }
  std::erase_if(pipes, [](const auto& known) { return known.expired(); });
  pipes.push_back(pipe);
}

void HttpServer::accept() {
  accept_connections(acceptor_, io_, accept_retry_, [this](tcp::socket& socket) {
    asio::error_code error;
    const auto address = socket.remote_endpoint(error).address();
    if (error || (options_.admit_address && !options_.admit_address(address))) {
      ++*refused_;
      return false;
    }
    auto peer = address.to_string();
    {
      std::lock_guard lock(peers_->mutex);
      auto& count = peers_->open[peer];
      if (count >= options_.max_connections_per_peer) {
        ++*refused_;
        return false;
      }
      ++count;  // the connection gives it back, whether or not it starts
    }
    const auto connection = std::make_shared<Connection>(
        std::move(socket), std::move(peer), options_, handler_, open_, peers_, streams_, share_);
    if (!connection->start()) {
      ++*refused_;
      return false;
    }
    return true;
  });
}

}  // namespace garm_edge::net
