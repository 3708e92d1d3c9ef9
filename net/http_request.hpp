#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace garm_edge::net {

struct HttpRequest {
  std::string method;
  std::string target;  // as sent: path plus optional ?query
  std::string path;
  std::string query;
  int minor_version = 1;  // HTTP/1.<minor>
  /// Header names lower-cased, values with surrounding whitespace removed, in arrival order.
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  bool keep_alive = true;

  std::optional<std::string_view> header(std::string_view lower_case_name) const;
};

/// The value of the query parameter `name` as sent (still percent-encoded); nothing when
/// absent.
std::optional<std::string_view> raw_query_value(const HttpRequest& request, std::string_view name);

struct HttpLimits {
  std::size_t max_header_bytes = 16 * 1024;  // request line + headers
  std::size_t max_headers = 64;
  std::size_t max_body_bytes = 1024 * 1024;
};

/// A strict, incremental HTTP/1.1 request parser, separate from any I/O (as in Asio's example
/// server). Accepts only what the agent's clients send: CRLF line ends, Content-Length bodies,
/// no obsolete line folding, no Transfer-Encoding. Anything else is an error with the status
/// to answer before closing the connection.
class HttpRequestParser {
 public:
  enum class Result { incomplete, complete, error };

  explicit HttpRequestParser(HttpLimits limits = {}) : limits_(limits) {}

  /// Consumes bytes from `data`; `consumed` says how many (the rest belongs to the next
  /// request on a keep-alive connection). After `complete`, take the request with `take()`.
  Result feed(std::string_view data, std::size_t& consumed);
  HttpRequest take();
  /// After `error`: the HTTP status to answer (400, 413, 431, 501, 505) and why.
  int error_status() const { return error_status_; }
  const std::string& error_reason() const { return error_reason_; }

 private:
  Result fail(int status, std::string reason);
  Result parse_head();

  HttpLimits limits_;
  std::string head_;
  std::size_t body_expected_ = 0;
  bool head_done_ = false;
  HttpRequest request_;
  int error_status_ = 0;
  std::string error_reason_;
};

}  // namespace garm_edge::net
