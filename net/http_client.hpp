#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "net/tls_config.hpp"

namespace garm_edge::net {

/// A request to an upstream (garm's callback and metadata URLs) that failed: a bad URL or
/// request, no connection, TLS refused, a deadline passed, or an answer that is not valid
/// HTTP. The message says which step failed and where (host:port); it never quotes a header
/// value, since those may hold bearer tokens.
class HttpClientError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A base URL to which request paths are appended.
struct UpstreamUrl {
  bool tls = true;
  std::string host;  // a DNS name or an address; an IPv6 address without its brackets
  std::uint16_t port = 443;
  std::string path;  // "" for the root, else "/..." without a trailing slash
  /// Plain HTTP over this unix socket instead of to host:port (never through a proxy).
  std::string unix_socket;

  bool operator==(const UpstreamUrl&) const = default;
};

/// Plain HTTP to the server on the unix socket at `path` (its Host: "localhost").
UpstreamUrl unix_socket_url(const std::filesystem::path& path);

/// Parses "http(s)://host[:port][/path]". Hosts are DNS names, IPv4 addresses or bracketed
/// IPv6 addresses; the path is kept as written (percent-encoding included) less its trailing
/// slashes. Throws HttpClientError on anything else: user info, a query or fragment, spaces,
/// control or non-ASCII characters, a missing or out-of-range port.
UpstreamUrl parse_upstream_url(std::string_view url);

struct ClientRequest {
  std::string method;
  std::string target;  // as sent: path plus optional ?query
  /// Sent in this order. Host, Content-Length, Transfer-Encoding and Connection are the
  /// client's own and refused here.
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
};

struct ClientResponse {
  int status = 0;
  /// Names lower-cased, values without surrounding whitespace, in arrival order.
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;

  /// The first header called `lower_case_name`.
  std::optional<std::string_view> header(std::string_view lower_case_name) const;
};

/// Receives a response body piece by piece, with the response's status (a redirect's body
/// comes here too). May throw to abandon the exchange.
using BodySink = std::function<void(int status, std::string_view data)>;
/// Called once with the final response's status and headers, before any of its body; returns
/// where the body goes (nullptr: into the returned response, as without a handler). May throw
/// to abandon the exchange.
using HeadHandler = std::function<BodySink(const ClientResponse& head)>;

/// Where requests go through an HTTP proxy (CONNECT for https, absolute-form for http), as
/// curl reads http_proxy, https_proxy and no_proxy. Empty strings: no proxy.
struct ProxySettings {
  std::string http_proxy;
  std::string https_proxy;
  std::string no_proxy;

  bool operator==(const ProxySettings&) const = default;
};

/// The proxy `url` goes through, if any: `https_proxy` or `http_proxy` by scheme, unless the
/// host matches `no_proxy` ("*", a name or a domain suffix, an address; ports ignored). A
/// proxy URL is "http://host[:port]" (default port 1080, as curl); throws HttpClientError
/// for anything else, e.g. credentials in it.
std::optional<UpstreamUrl> proxy_for(const UpstreamUrl& url, const ProxySettings& proxies);

struct HttpClientOptions {
  std::chrono::milliseconds connect_timeout{std::chrono::seconds(5)};
  /// Everything after connecting: handshake, request and the whole response.
  std::chrono::milliseconds request_timeout{std::chrono::seconds(30)};
  /// The response body (after chunked decoding); the head has its own fixed limit.
  std::size_t max_response_bytes = 32 * 1024 * 1024;
  /// Connect through this HTTP proxy instead of to the URL's host.
  std::optional<UpstreamUrl> proxy = std::nullopt;
  /// When it turns true the exchange ends (as at its deadline) within 200 ms, even while the
  /// server sends nothing. Must outlive the call.
  const std::atomic<bool>* stop = nullptr;
};

/// The request as sent on the wire: request line, Host (with the port when not the scheme's
/// default), the caller's headers, Content-Length (when there is a body, and always for POST,
/// PUT and PATCH), Connection: close, then the body. Throws HttpClientError for a method that
/// is not a token, a target that is not origin-form printable ASCII, a header name that is
/// not a token, a value with CR, LF or NUL, or one of the client's own headers.
std::string serialize_client_request(const UpstreamUrl& url, const ClientRequest& request);

/// One request on a fresh connection, closed afterwards. Blocking, with deadlines on every
/// step. For https the server's certificate must chain to `trust` (see
/// TlsConfig::client_trusting) and name `url.host`; `trust` is required then and ignored for
/// http. Throws HttpClientError.
ClientResponse send_request(const UpstreamUrl& url, const ClientRequest& request,
                            const HttpClientOptions& options,
                            std::shared_ptr<const TlsConfig> trust);

/// send_request for bodies too large to hold: the body goes to `sink` and the returned
/// response's body stays empty.
ClientResponse send_request_streaming(const UpstreamUrl& url, const ClientRequest& request,
                                      const HttpClientOptions& options,
                                      std::shared_ptr<const TlsConfig> trust, BodySink sink);
/// send_request that lets `on_head` see the answer's head and choose where its body goes
/// (e.g. straight on to a client) before any of the body arrives.
ClientResponse send_request_with_head(const UpstreamUrl& url, const ClientRequest& request,
                                      const HttpClientOptions& options,
                                      std::shared_ptr<const TlsConfig> trust, HeadHandler on_head);

/// An incremental HTTP/1.x response parser, separate from any I/O. Handles Content-Length,
/// chunked (extensions and trailers dropped) and close-delimited bodies, skips interim 1xx
/// answers, and knows the answers that carry no body (to HEAD, 204, 304). Throws
/// HttpClientError, without quoting header values, on anything malformed or too large.
class HttpResponseParser {
 public:
  enum class Result { incomplete, complete };

  explicit HttpResponseParser(std::size_t max_body_bytes, bool response_to_head = false)
      : max_body_bytes_(max_body_bytes), response_to_head_(response_to_head) {}

  /// From now on the body goes to `sink` (with the final status) instead of into take()'s
  /// response; `max_body_bytes` still bounds it.
  void stream_body_to(BodySink sink) { body_sink_ = std::move(sink); }
  /// A 101 answer is final and has no body (for a WebSocket upgrade that was asked for); else
  /// 101 is refused as never asked for.
  void allow_switching_protocols() { switching_allowed_ = true; }
  /// `on_head` sees the final response's head and may choose a sink for its body.
  void on_head(HeadHandler handler) { head_handler_ = std::move(handler); }

  /// Consumes `data`. After `complete`, bytes beyond the response are ignored (the
  /// connection is closed after one request anyway).
  Result feed(std::string_view data);
  /// The peer closed the connection: ends a close-delimited body; anything else still
  /// incomplete was cut off and throws.
  void finish();
  bool complete() const { return state_ == State::done; }
  /// True while the body runs until the connection closes (its end proves nothing on its own).
  bool close_delimited() const { return state_ == State::body_until_close; }
  /// The response, once complete.
  ClientResponse take();

  static constexpr std::size_t kMaxHeadBytes = 64 * 1024;
  static constexpr std::size_t kMaxHeaders = 128;
  static constexpr std::size_t kMaxChunkLineBytes = 4 * 1024;

 private:
  enum class State {
    head,
    body_with_length,
    body_until_close,
    chunk_size,
    chunk_data,
    chunk_data_end,
    trailers,
    done
  };

  /// Each step consumes a prefix of `data` and says how much.
  std::size_t consume_head(std::string_view data);
  std::size_t consume_body_with_length(std::string_view data);
  std::size_t consume_body_until_close(std::string_view data);
  std::size_t consume_chunk_size(std::string_view data);
  std::size_t consume_chunk_data(std::string_view data);
  std::size_t consume_chunk_data_end(std::string_view data);
  std::size_t consume_trailers(std::string_view data);

  /// Parses a complete head (status line and headers) and picks the body's framing.
  void parse_head(std::string_view head);
  void choose_framing();
  void append_body(std::string_view data);
  /// Takes one CRLF-terminated line into pending_ (bounded by `limit`); true once it is whole.
  bool take_line(std::string_view data, std::size_t& consumed, std::size_t limit, const char* what);

  std::size_t max_body_bytes_;
  bool response_to_head_;
  bool switching_allowed_ = false;
  State state_ = State::head;
  std::string pending_;  // the head, or the current chunk-size or trailer line, so far
  std::uint64_t remaining_ = 0;
  std::size_t trailer_bytes_ = 0;
  std::uint64_t body_bytes_ = 0;
  BodySink body_sink_;
  HeadHandler head_handler_;
  ClientResponse response_;
};

/// A whole response as received before the peer closed the connection (for tests and
/// fuzzing): HttpResponseParser::feed then finish.
ClientResponse parse_http_response(std::string_view raw,
                                   std::size_t max_body_bytes = 32 * 1024 * 1024,
                                   bool response_to_head = false);

}  // namespace garm_edge::net
