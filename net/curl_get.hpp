#pragma once

#include <atomic>
#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "net/http_client.hpp"

namespace garm_edge::net {

/// A GET of a large file from the Internet (an image, a runner archive) through libcurl with
/// OpenSSL: the control plane's mutual TLS stays on mbedTLS, but OpenSSL decrypts at the
/// link's rate where mbedTLS 2.28 manages 140 MB/s (docs/performance.md).
struct CurlGet {
  std::string url;
  std::vector<std::pair<std::string, std::string>> headers;  // sent to every host
  std::string bearer_token;  // sent only to the URL's own origin, as curl does
  ProxySettings proxies;     // never the process's environment
  std::string extra_ca_pem;  // trusted besides the system's CAs
  std::chrono::milliseconds timeout{std::chrono::minutes(1)};  // the whole exchange, all hops
  std::chrono::milliseconds connect_timeout{std::chrono::seconds(10)};
  /// Above zero: given up when nothing arrives for this long.
  std::chrono::milliseconds stall{0};
  const std::atomic<bool>* stop = nullptr;
  int max_redirects = 5;
};

struct CurlAnswer {
  ClientResponse response;  // status and headers; the body went where on_head said
  std::string where;        // "host:port" that gave it
};

/// Follows up to max_redirects redirects (never from https to plain http, never to another
/// scheme than http and https) and calls `on_head` with the final answer's head; its body
/// goes to the sink `on_head` returns (nullptr: dropped, never held). Throws HttpClientError
/// naming the host and what went wrong ("the download was stopped" once `stop` is set);
/// what the sink throws comes through as it is.
CurlAnswer curl_get(const CurlGet& get, const HeadHandler& on_head);

}  // namespace garm_edge::net
