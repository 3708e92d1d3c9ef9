#pragma once

// Internal to net/: mbedTLS's BIO over a non-blocking Asio socket, for the TLS server's
// connections and the hub's end of a tunnel (TlsChannel): the same socket calls and the same
// mapping of "would block" to mbedTLS's WANT_READ/WANT_WRITE.

#include <cstddef>

#include <asio.hpp>
#include <mbedtls/net_sockets.h>
#include <mbedtls/ssl.h>

namespace garm_edge::net {

inline int send_on_socket(asio::ip::tcp::socket& socket, const unsigned char* data,
                          std::size_t size) {
  asio::error_code error;
  const auto sent = socket.write_some(asio::buffer(data, size), error);
  if (error == asio::error::would_block || error == asio::error::try_again) {
    return MBEDTLS_ERR_SSL_WANT_WRITE;
  }
  return error ? MBEDTLS_ERR_NET_SEND_FAILED : static_cast<int>(sent);
}

inline int receive_on_socket(asio::ip::tcp::socket& socket, unsigned char* data, std::size_t size) {
  asio::error_code error;
  const auto got = socket.read_some(asio::buffer(data, size), error);
  if (error == asio::error::would_block || error == asio::error::try_again) {
    return MBEDTLS_ERR_SSL_WANT_READ;
  }
  if (error == asio::error::eof) {
    return 0;
  }
  return error ? MBEDTLS_ERR_NET_RECV_FAILED : static_cast<int>(got);
}

/// mbedTLS asked to be called again once the socket is ready.
inline bool wants_io(int rc) {
  return rc == MBEDTLS_ERR_SSL_WANT_READ || rc == MBEDTLS_ERR_SSL_WANT_WRITE;
}

}  // namespace garm_edge::net
