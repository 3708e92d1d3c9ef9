#pragma once

// Internal to net/: the blocking-socket pieces both HTTP clients share (HttpsClient for the
// agent's mutual-TLS API, send_request for garm's upstream URLs). Every step has a deadline.

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

#include <mbedtls/ssl.h>

#include "common/unique_fd.hpp"
#include "net/tls_stream.hpp"

namespace garm_edge::net {

using SteadyClock = std::chrono::steady_clock;

/// A failed step of one exchange; each client turns it into its own public error type.
class TransportError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// "host:port", with brackets around an IPv6 address: the "where" of every error message.
std::string describe_endpoint(const std::string& host, std::uint16_t port);

/// Resolves `host` and connects (non-blocking) to the first address that answers before the
/// deadline. The socket stays non-blocking, with TCP_NODELAY.
UniqueFd connect_before(const std::string& host, std::uint16_t port,
                        SteadyClock::time_point deadline);

/// Connects (non-blocking) to the unix socket at `path` before the deadline; the socket stays
/// non-blocking. Throws TransportError.
UniqueFd connect_unix_before(const std::string& path, SteadyClock::time_point deadline);

/// A connected non-blocking socket and the deadline every later read and write must meet.
/// With `stop`, a wait also ends (as at the deadline) within kStopPollInterval of it turning
/// true: a download nobody wants any more ends even while its server sends nothing.
struct Transport {
  int fd;
  SteadyClock::time_point deadline;
  const std::atomic<bool>* stop = nullptr;
};
inline constexpr std::chrono::milliseconds kStopPollInterval{200};

/// mbedTLS BIO callbacks over a Transport (context): wait with poll until the deadline and
/// answer MBEDTLS_ERR_SSL_TIMEOUT after it.
int send_with_deadline(void* context, const unsigned char* data, std::size_t size);
int receive_with_deadline(void* context, unsigned char* data, std::size_t size);

/// The same, for plain connections, with errors as TransportError ("sending to <where>: ...").
void send_all_plain(Transport& transport, std::string_view data, const std::string& where);
/// Bytes read into `data`, 0 when the peer closed the connection.
std::size_t receive_plain(Transport& transport, char* data, std::size_t size,
                          const std::string& where);

/// One client-side TLS connection over a Transport: set up from a config, checking the peer's
/// certificate against `host`: a DNS name against its DNS SANs (and CN), an IPv4 or IPv6
/// address against its IP SANs.
class TlsSession {
 public:
  TlsSession(const mbedtls_ssl_config* config, const std::string& host, Transport& transport);
  ~TlsSession();
  TlsSession(const TlsSession&) = delete;
  TlsSession& operator=(const TlsSession&) = delete;

  /// Throws TransportError naming `where` and, after a failed verification, why the
  /// certificate was refused.
  void handshake(const std::string& where);
  void write_all(std::string_view data, const std::string& where);
  /// Bytes read, 0 when the peer closed the connection (see closed_cleanly).
  std::size_t read_some(char* data, std::size_t size, const std::string& where);
  /// The peer ended with close_notify rather than a bare TCP close (which anyone on the path
  /// can forge): only then does the end of the stream prove nothing was cut off.
  bool closed_cleanly() const { return closed_cleanly_; }

  mbedtls_ssl_context* context() { return ssl_.get(); }
  /// The established session, for a new owner that sets its own BIO callbacks (a session
  /// loaded with load_session must not be taken: it lives here).
  SslContextPtr release();
  /// Offers a session saved by session_bytes() for resumption (before the handshake); false
  /// when it does not load.
  bool offer_session(std::string_view saved);
  /// The established session, serialized ("" when mbedTLS cannot give it).
  std::string session_bytes();

 private:
  SslContextPtr ssl_ = make_ssl_context();
  std::string expected_address_;  // the peer's address in network order, when `host` is one
  bool closed_cleanly_ = false;
};

}  // namespace garm_edge::net
