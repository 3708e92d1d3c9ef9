#pragma once

#include <chrono>
#include <memory>
#include <string>

#include <asio.hpp>

#include "net/https_client.hpp"
#include "net/tls_stream.hpp"

namespace garm_edge::net {

/// The answer to a dial-out connection's first request.
struct TurnedAround {
  int status = 0;
  std::string body;
  /// On 200: the established session, now to be served (its socket on the given executor).
  std::shared_ptr<TlsStream> stream;
};

/// Connects to `target`, handshakes as client with `tls` (the peer's certificate checked as
/// HttpsClient checks it), sends `request` (a whole HTTP/1.1 request) and reads one answer,
/// which must carry a Content-Length. On 200 the connection stays open and changes hands:
/// the peer that accepted it sends requests from then on. Everything runs before `deadline`.
/// Throws HttpsError.
TurnedAround dial_and_turn_around(const HttpsTarget& target, std::shared_ptr<const TlsConfig> tls,
                                  const std::string& request,
                                  std::chrono::steady_clock::time_point deadline,
                                  const asio::any_io_executor& executor);

}  // namespace garm_edge::net
