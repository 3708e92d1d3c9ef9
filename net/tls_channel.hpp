#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <asio.hpp>

#include "net/http_client.hpp"
#include "net/tls_stream.hpp"

namespace garm_edge::net {

/// The accepting end of a turned-around connection (a hub's end of an agent's tunnel): sends
/// HTTP requests to the peer that dialed in, one at a time, and reads its answers. Everything
/// runs on the socket's strand; the public calls may come from any thread.
class TlsChannel : public std::enable_shared_from_this<TlsChannel> {
 public:
  /// The answer, or nothing and why not (the channel is closed then) and whether any of the
  /// request was written (if not, the peer cannot have acted on it).
  using Done =
      std::function<void(std::optional<ClientResponse> answer, std::string error, bool sent)>;

  static std::shared_ptr<TlsChannel> open(std::shared_ptr<TlsStream> stream,
                                          std::size_t max_response_bytes);
  /// `on_closed` runs once, on the strand, when the channel closes for any reason (at once
  /// if it has closed already).
  void on_close(std::function<void()> on_closed);
  ~TlsChannel();
  TlsChannel(const TlsChannel&) = delete;
  TlsChannel& operator=(const TlsChannel&) = delete;

  /// Sends `request` (a whole HTTP/1.1 request, keep-alive) and calls `done` once: with the
  /// answer, or with an error when the peer closes, sends garbage or misses `timeout`. A
  /// request to a channel that is busy or closed fails at once. `done` runs on the strand.
  void exchange(std::string request, std::chrono::milliseconds timeout, Done done);
  /// Closes the connection; an exchange in progress fails.
  void close();
  const PeerIdentity& peer() const { return peer_; }

 private:
  TlsChannel(std::shared_ptr<TlsStream> stream, std::size_t max_response_bytes);
  void start(bool spoke_first);
  void watch_while_idle();
  void write();
  void read();
  void finish(std::optional<ClientResponse> answer, std::string error);
  void shut(const std::string& why);
  void arm_deadline(std::chrono::milliseconds timeout);
  template <class Next>
  void wait_for(int want, Next next);
  static int send(void* context, const unsigned char* data, std::size_t size);
  static int receive(void* context, unsigned char* data, std::size_t size);

  asio::ip::tcp::socket socket_;
  asio::steady_timer timer_;
  std::shared_ptr<const TlsConfig> tls_;  // before ssl_: mbedtls_ssl_free reads the config
  SslContextPtr ssl_;
  PeerIdentity peer_;
  std::size_t max_response_bytes_;
  std::function<void()> on_closed_;
  std::optional<HttpResponseParser> parser_;
  std::string outgoing_;
  std::size_t written_ = 0;
  Done done_;
  bool closed_ = false;
  std::uint64_t epoch_ = 0;  // which deadline and idle watch are current
};

}  // namespace garm_edge::net
