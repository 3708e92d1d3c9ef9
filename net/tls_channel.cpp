#include "net/tls_channel.hpp"

#include <array>

#include "net/socket_bio.hpp"

namespace garm_edge::net {
std::shared_ptr<TlsChannel> TlsChannel::open(std::shared_ptr<TlsStream> stream,
                                             std::size_t max_response_bytes) {
  const bool spoke_first = !stream->early_bytes.empty();
  std::shared_ptr<TlsChannel> channel(new TlsChannel(std::move(stream), max_response_bytes));
  channel->start(spoke_first);
  return channel;
}

TlsChannel::TlsChannel(std::shared_ptr<TlsStream> stream, std::size_t max_response_bytes)
    : socket_(std::move(stream->socket)),
      timer_(socket_.get_executor()),
      tls_(std::move(stream->tls)),
      ssl_(std::move(stream->ssl)),
      peer_(std::move(stream->peer)),
      max_response_bytes_(max_response_bytes) {
  mbedtls_ssl_set_bio(ssl_.get(), this, &TlsChannel::send, &TlsChannel::receive, nullptr);
  asio::error_code ignored;
  socket_.non_blocking(true, ignored);
  socket_.set_option(asio::ip::tcp::no_delay(true), ignored);
}

TlsChannel::~TlsChannel() {
  if (ssl_) {
    mbedtls_ssl_set_bio(ssl_.get(), nullptr, nullptr, nullptr, nullptr);
  }
}

void TlsChannel::start(bool spoke_first) {
  asio::post(socket_.get_executor(), [self = shared_from_this(), spoke_first] {
    spoke_first ? self->shut("the peer spoke out of turn") : self->watch_while_idle();
  });
}

void TlsChannel::on_close(std::function<void()> on_closed) {
  asio::post(socket_.get_executor(),
             [self = shared_from_this(), on_closed = std::move(on_closed)]() mutable {
               if (self->closed_) {
                 return on_closed();
               }
               self->on_closed_ = std::move(on_closed);
             });
}

/// Between exchanges the peer has nothing to say: anything readable then (its close, a TCP
/// reset, stray bytes) ends the channel, so a dead tunnel leaves the pool at once.
void TlsChannel::watch_while_idle() {
  const auto epoch = epoch_;
  socket_.async_wait(asio::ip::tcp::socket::wait_read,
                     [self = shared_from_this(), epoch](const asio::error_code& error) {
                       if (self->closed_ || self->epoch_ != epoch || self->done_) {
                         return;
                       }
                       self->shut(error ? error.message() : "the peer spoke out of turn");
                     });
}

void TlsChannel::exchange(std::string request, std::chrono::milliseconds timeout, Done done) {
  asio::post(socket_.get_executor(), [self = shared_from_this(), request = std::move(request),
                                      timeout, done = std::move(done)]() mutable {
    if (self->closed_ || self->done_) {
      return done(std::nullopt, self->closed_ ? "the tunnel is closed" : "the tunnel is busy",
                  false);
    }
    self->done_ = std::move(done);
    self->outgoing_ = std::move(request);
    self->written_ = 0;
    self->parser_.emplace(self->max_response_bytes_);
    ++self->epoch_;  // the idle watch no longer counts
    self->arm_deadline(timeout);
    self->write();
  });
}

void TlsChannel::close() {
  asio::post(socket_.get_executor(), [self = shared_from_this()] { self->shut("closed"); });
}

void TlsChannel::write() {
  while (written_ < outgoing_.size()) {
    const int rc = mbedtls_ssl_write(
        ssl_.get(), reinterpret_cast<const unsigned char*>(outgoing_.data()) + written_,
        outgoing_.size() - written_);
    if (wants_io(rc)) {
      return wait_for(rc, [](TlsChannel& self) { self.write(); });
    }
    if (rc <= 0) {
      return shut(describe_tls_error("sending", rc));
    }
    written_ += static_cast<std::size_t>(rc);
  }
  read();
}

void TlsChannel::read() {
  while (true) {
    std::array<unsigned char, 16 * 1024> buffer{};
    const int rc = mbedtls_ssl_read(ssl_.get(), buffer.data(), buffer.size());
    if (wants_io(rc)) {
      return wait_for(rc, [](TlsChannel& self) { self.read(); });
    }
    if (rc <= 0) {
      return shut(rc == 0 || rc == MBEDTLS_ERR_SSL_PEER_CLOSE_NOTIFY
                      ? "the peer closed the tunnel"
                      : describe_tls_error("reading", rc));
    }
    try {
      if (parser_->feed({reinterpret_cast<const char*>(buffer.data()),
                         static_cast<std::size_t>(rc)}) == HttpResponseParser::Result::complete) {
        auto answer = parser_->take();
        const bool closing =
            answer.header("connection") == std::optional<std::string_view>("close");
        finish(std::move(answer), "");
        if (closing) {
          shut("the peer ended the tunnel after its answer");
        }
        return;
      }
    } catch (const HttpClientError& e) {
      return shut(std::string("the answer is not HTTP: ") + e.what());
    }
  }
}

void TlsChannel::finish(std::optional<ClientResponse> answer, std::string error) {
  if (!done_) {
    return;
  }
  ++epoch_;
  timer_.cancel();
  auto done = std::exchange(done_, nullptr);
  parser_.reset();
  if (!closed_) {
    watch_while_idle();
  }
  const bool sent = answer.has_value() || written_ > 0;
  done(std::move(answer), std::move(error), sent);
}

void TlsChannel::shut(const std::string& why) {
  if (closed_) {
    return;
  }
  closed_ = true;
  finish(std::nullopt, why);
  ++epoch_;
  timer_.cancel();
  asio::error_code ignored;
  socket_.shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
  socket_.close(ignored);
  if (auto closed = std::exchange(on_closed_, nullptr)) {
    closed();
  }
}

void TlsChannel::arm_deadline(std::chrono::milliseconds timeout) {
  const auto epoch = epoch_;
  timer_.expires_after(timeout);
  timer_.async_wait([weak = weak_from_this(), epoch](const asio::error_code& error) {
    if (auto self = weak.lock(); self && !error && self->epoch_ == epoch) {
      self->shut("no answer in time");
    }
  });
}

template <class Next>
void TlsChannel::wait_for(int want, Next next) {
  const auto direction = want == MBEDTLS_ERR_SSL_WANT_WRITE ? asio::ip::tcp::socket::wait_write
                                                            : asio::ip::tcp::socket::wait_read;
  socket_.async_wait(direction, [self = shared_from_this(), next](const asio::error_code& error) {
    if (self->closed_) {
      return;
    }
    if (error) {
      return self->shut(error.message());
    }
    next(*self);
  });
}

int TlsChannel::send(void* context, const unsigned char* data, std::size_t size) {
  return send_on_socket(static_cast<TlsChannel*>(context)->socket_, data, size);
}

int TlsChannel::receive(void* context, unsigned char* data, std::size_t size) {
  return receive_on_socket(static_cast<TlsChannel*>(context)->socket_, data, size);
}

}  // namespace garm_edge::net
