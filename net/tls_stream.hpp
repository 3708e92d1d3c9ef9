#pragma once

#include <memory>
#include <string>
#include <vector>

#include <asio.hpp>
#include <mbedtls/ssl.h>

#include "net/peer_identity.hpp"
#include "net/tls_config.hpp"

namespace garm_edge::net {

/// The CN and URI SANs of `certificate` (empty for none).
PeerIdentity identity_of(const mbedtls_x509_crt* certificate);

struct SslContextFree {
  void operator()(mbedtls_ssl_context* ssl) const;
};
/// An mbedTLS context on the heap, so that an established session can change hands: whoever
/// holds it sets its own BIO callbacks.
using SslContextPtr = std::unique_ptr<mbedtls_ssl_context, SslContextFree>;
SslContextPtr make_ssl_context();

/// An established TLS connection passed from the code that made it (a handshake as client or
/// as server) to the code that uses it: a dial-out connection turned around, so that the side
/// that connected answers requests and the side that accepted sends them.
struct TlsStream {
  asio::ip::tcp::socket socket;
  std::shared_ptr<const TlsConfig> tls;  // the context points into it: destroyed after it
  SslContextPtr ssl;
  PeerIdentity peer;
  std::string early_bytes;  // plaintext already read past what the first owner consumed
};

}  // namespace garm_edge::net
