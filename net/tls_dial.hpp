#pragma once

#include <chrono>
#include <memory>
#include <mutex>
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

/// The last session a dialer's full handshake made, offered by its next dials: a tunnel resumed
/// costs the peer no public-key work (a hub of hundreds of agents dials thousands of tunnels
/// in a burst). Thread-safe; forget() it when the TLS config changes.
class SessionMemory {
 public:
  /// The session remembered, when it was made under the CAs `ca_tag` names.
  std::string get(const std::string& ca_tag) const;
  void put(std::string ca_tag, std::string session);
  void forget() { put({}, {}); }

 private:
  mutable std::mutex mutex_;
  std::string ca_tag_;
  std::string session_;
};

/// Connects to `target`, handshakes as client with `tls` (the peer's certificate checked as
/// HttpsClient checks it), sends `request` (a whole HTTP/1.1 request) and reads one answer,
/// which must carry a Content-Length. On 200 the connection stays open and changes hands:
/// the peer that accepted it sends requests from then on. Everything runs before `deadline`.
/// With `sessions`, the remembered session is offered (a resumed peer's certificate is checked
/// with TlsConfig::still_accepts) and the new one remembered. Throws HttpsError.
TurnedAround dial_and_turn_around(const HttpsTarget& target, std::shared_ptr<const TlsConfig> tls,
                                  const std::string& request,
                                  std::chrono::steady_clock::time_point deadline,
                                  const asio::any_io_executor& executor,
                                  SessionMemory* sessions = nullptr);

}  // namespace garm_edge::net
