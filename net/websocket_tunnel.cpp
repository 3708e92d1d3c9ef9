#include "net/websocket_tunnel.hpp"

#include <array>
#include <cerrno>
#include <poll.h>

#include "net/http_syntax.hpp"
#include "net/socket_io.hpp"
#include "net/upstream_connection.hpp"

namespace garm_edge::net {
namespace {

constexpr std::size_t kMaxRefusalBytes = 64 * 1024;

/// serialize_client_request (which checks every header) with the upgrade's Connection header
/// in place of its own "close".
std::string upgrade_request(const UpstreamUrl& url, const std::string& target,
                            std::vector<std::pair<std::string, std::string>> headers) {
  for (const auto& [name, value] : headers) {
    if (http_syntax::equals_ignoring_case(name, "upgrade")) {
      throw HttpClientError("the Upgrade header is the tunnel's own");
    }
  }
  headers.emplace_back("Upgrade", "websocket");
  auto wire = serialize_client_request(
      url,
      {.method = "GET", .target = url.path + target, .headers = std::move(headers), .body = ""});
  constexpr std::string_view kClose = "Connection: close\r\n\r\n";
  wire.replace(wire.size() - kClose.size(), kClose.size(), "Connection: Upgrade\r\n\r\n");
  return wire;
}

}  // namespace

WebSocketTunnel::WebSocketTunnel(const UpstreamUrl& url, const std::string& target,
                                 const std::vector<std::pair<std::string, std::string>>& headers,
                                 const HttpClientOptions& options,
                                 std::shared_ptr<const TlsConfig> trust)
    : trust_(std::move(trust)) {
  const auto where = describe_endpoint(url.host, url.port);
  if (url.tls && trust_ == nullptr) {
    throw HttpClientError("https to " + where + " needs a TLS configuration to trust");
  }
  const auto wire = upgrade_request(url, target, headers);
  try {
    connection_ = std::make_unique<UpstreamConnection>(url, trust_.get(), options, where);
    connection_->write_all(wire);
    HttpResponseParser parser(kMaxRefusalBytes);
    parser.allow_switching_protocols();
    std::string head;
    std::array<char, 4096> buffer{};
    // The head alone goes to the parser: after a 101, what follows it is the WebSocket's.
    while (true) {
      const auto end = head.find("\r\n\r\n");
      if (end != std::string::npos) {
        early_bytes_ = head.substr(end + 4);
        head.resize(end + 4);
        break;
      }
      if (head.size() > HttpResponseParser::kMaxHeadBytes) {
        throw HttpClientError("the answer's head is too large");
      }
      const auto got = connection_->read_some(buffer.data(), buffer.size());
      if (got == 0) {
        throw HttpClientError("the connection closed before the answer's head ended");
      }
      head.append(buffer.data(), got);
    }
    auto result = parser.feed(head);
    if (result != HttpResponseParser::Result::complete && !early_bytes_.empty()) {
      result = parser.feed(std::exchange(early_bytes_, {}));
    }
    while (result != HttpResponseParser::Result::complete) {
      const auto got = connection_->read_some(buffer.data(), buffer.size());
      if (got == 0) {
        parser.finish();
        break;
      }
      result = parser.feed({buffer.data(), got});
    }
    answer_ = parser.take();
  } catch (const TransportError& e) {
    throw HttpClientError(e.what());
  } catch (const HttpClientError& e) {
    throw HttpClientError("the WebSocket upgrade at " + where + ": " + e.what());
  }
}

WebSocketTunnel::~WebSocketTunnel() = default;

WebSocketTunnel::End WebSocketTunnel::splice(int client_fd, std::string from_client,
                                             std::chrono::milliseconds idle,
                                             std::chrono::milliseconds stall, int stop_fd) {
  Transport client{client_fd, SteadyClock::now() + stall};
  const std::string where = "the client";
  std::array<char, 16 * 1024> buffer{};
  try {
    connection_->set_deadline(SteadyClock::now() + stall);
    if (!from_client.empty()) {
      connection_->write_all(from_client);
    }
    if (!early_bytes_.empty()) {
      send_all_plain(client, std::exchange(early_bytes_, {}), where);
    }
    auto last_byte = SteadyClock::now();
    while (true) {
      bool upstream_ready = connection_->has_buffered_input();
      bool client_ready = false;
      if (!upstream_ready) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(last_byte + idle -
                                                                                SteadyClock::now());
        if (left.count() <= 0) {
          return End::idle;
        }
        std::array<pollfd, 3> fds{
            {{client_fd, POLLIN, 0}, {connection_->fd(), POLLIN, 0}, {stop_fd, POLLIN, 0}}};
        const int ready = ::poll(fds.data(), fds.size(), static_cast<int>(left.count()));
        if (ready < 0 && errno != EINTR) {
          return End::failed;
        }
        if (ready <= 0) {
          continue;
        }
        if (fds[2].revents != 0) {
          return End::stopped;
        }
        client_ready = fds[0].revents != 0;
        upstream_ready = fds[1].revents != 0;
      }
      if (upstream_ready) {
        connection_->set_deadline(SteadyClock::now() + stall);
        const auto got = connection_->read_some(buffer.data(), buffer.size());
        if (got == 0) {
          return End::upstream_closed;
        }
        client.deadline = SteadyClock::now() + stall;
        send_all_plain(client, {buffer.data(), got}, where);
        last_byte = SteadyClock::now();
      }
      if (client_ready) {
        client.deadline = SteadyClock::now() + stall;
        const auto got = receive_plain(client, buffer.data(), buffer.size(), where);
        if (got == 0) {
          return End::client_closed;
        }
        connection_->set_deadline(SteadyClock::now() + stall);
        connection_->write_all({buffer.data(), got});
        last_byte = SteadyClock::now();
      }
    }
  } catch (const TransportError&) {
    return End::failed;
  } catch (const HttpClientError&) {
    return End::failed;
  }
}

std::string_view to_string(WebSocketTunnel::End end) {
  switch (end) {
    case WebSocketTunnel::End::client_closed:
      return "the guest closed it";
    case WebSocketTunnel::End::upstream_closed:
      return "garm closed it";
    case WebSocketTunnel::End::idle:
      return "idle";
    case WebSocketTunnel::End::stopped:
      return "closed by the agent";
    case WebSocketTunnel::End::failed:
      return "a read or write failed";
  }
  return "unknown";
}

}  // namespace garm_edge::net
