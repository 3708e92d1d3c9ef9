#pragma once

// The accept loop both servers share; internal to net/.

#include <chrono>
#include <cstdint>
#include <string>

#include <asio.hpp>

namespace garm_edge::net {

inline void listen_on(asio::ip::tcp::acceptor& acceptor, const std::string& address,
                      std::uint16_t port) {
  const asio::ip::tcp::endpoint endpoint(asio::ip::make_address(address), port);
  acceptor.open(endpoint.protocol());
  acceptor.set_option(asio::ip::tcp::acceptor::reuse_address(true));
  acceptor.bind(endpoint);
  acceptor.listen();
}

/// Accepts until the acceptor closes, each connection on its own strand. `admit(socket)` takes
/// the connection or returns false to refuse it (over a limit: refused rather than queued).
template <class Admit>
void accept_connections(asio::ip::tcp::acceptor& acceptor, asio::io_context& io,
                        asio::steady_timer& retry, Admit admit) {
  acceptor.async_accept(
      asio::make_strand(io), [&acceptor, &io, &retry, admit](const asio::error_code& error,
                                                             asio::ip::tcp::socket socket) mutable {
        if (error == asio::error::operation_aborted || !acceptor.is_open()) {
          return;
        }
        if (error) {
          // e.g. out of file descriptors: retry shortly instead of spinning on the same error
          retry.expires_after(std::chrono::milliseconds(100));
          retry.async_wait([&acceptor, &io, &retry, admit](const asio::error_code& cancelled) {
            if (!cancelled) {
              accept_connections(acceptor, io, retry, admit);
            }
          });
          return;
        }
        if (!admit(socket)) {
          asio::error_code ignored;
          socket.close(ignored);
        }
        accept_connections(acceptor, io, retry, admit);
      });
}

}  // namespace garm_edge::net
