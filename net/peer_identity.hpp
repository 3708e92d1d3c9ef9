#pragma once

#include <string>
#include <vector>

namespace garm_edge::net {

/// Who is on the other end, from the verified certificate.
struct PeerIdentity {
  std::string common_name;
  std::vector<std::string> uri_names;  // URI subject alternative names
  std::string serial = {};             // the certificate's serial number, hex
  /// The peer's address (an IPv6 peer's /64), as the server's per-address limits count it.
  std::string address = {};
};

}  // namespace garm_edge::net
