#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/unique_fd.hpp"
#include "net/body_pipe.hpp"

namespace garm_edge::net {

struct TlsStream;

/// A body sent from an open file, read from offset 0 for `size` bytes, so that a large
/// download never sits in memory. The descriptor keeps the file readable even if its name is
/// removed meanwhile.
struct FileBody {
  UniqueFd fd;
  std::uint64_t size = 0;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
  /// When set, the body is this file's content and `body` is ignored.
  std::shared_ptr<FileBody> file = nullptr;
  /// When set, the body comes from this pipe as it is made, sent chunked; `body` is ignored.
  /// A body cut off upstream ends the connection without the last chunk, so the client sees
  /// it was cut off.
  std::shared_ptr<BodyPipe> stream = nullptr;
  /// For 101 Switching Protocols: after the head (status line and `headers` only), the
  /// client's socket and whatever it sent after its request are handed here, and the server
  /// forgets the connection.
  std::function<void(UniqueFd socket, std::string early_bytes)> upgrade = nullptr;
  /// TLS servers only: after this answer, the connection's established session is handed here
  /// and the server forgets the connection (a hub turns an agent's dial-out connection around).
  std::function<void(std::shared_ptr<TlsStream>)> take_over_tls = nullptr;
  /// An answer to HEAD: Content-Length says this (the length a GET would have) and no body
  /// follows; `body`, `file` and `stream` are ignored.
  std::optional<std::uint64_t> head_length = std::nullopt;
  /// The connection closes after this answer, whatever the client asked for (a client that
  /// may not be served has no reason to keep a connection).
  bool close_connection = false;
};

std::string_view reason_phrase(int status);
/// The status line, headers (Content-Length or chunked Transfer-Encoding, Connection) and body
/// (not a file's or a pipe's). An upgrade's head carries only the caller's headers. A pipe's
/// body goes chunked to an HTTP/1.1 client; an HTTP/1.0 client reads it until the connection
/// closes (`keep_alive` must then be false).
std::string serialize(const HttpResponse& response, bool keep_alive, bool client_reads_chunked);

}  // namespace garm_edge::net
