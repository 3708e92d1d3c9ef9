#include "net/upstream_connection.hpp"

#include <mbedtls/ssl.h>

namespace garm_edge::net {

std::string printable_status_line(std::string_view head) {
  const auto line = head.substr(0, std::min<std::size_t>(head.find('\r'), 80));
  std::string out;
  for (const char c : line) {
    out += (c >= 0x20 && c < 0x7f) ? c : '?';
  }
  return out;
}

namespace {

UniqueFd connect_for(const UpstreamUrl& url, const HttpClientOptions& options) {
  const auto deadline = SteadyClock::now() + options.connect_timeout;
  if (!url.unix_socket.empty()) {
    return connect_unix_before(url.unix_socket, deadline);
  }
  return connect_before(options.proxy ? options.proxy->host : url.host,
                        options.proxy ? options.proxy->port : url.port, deadline);
}

}  // namespace

UpstreamConnection::UpstreamConnection(const UpstreamUrl& url, const TlsConfig* trust,
                                       const HttpClientOptions& options, const std::string& where)
    : where_(where),
      socket_(connect_for(url, options)),
      transport_{socket_.get(), SteadyClock::now() + options.request_timeout, options.stop} {
  if (options.proxy && url.tls && url.unix_socket.empty()) {
    open_tunnel(url, *options.proxy);
  }
  if (url.tls) {
    tls_.emplace(trust->ssl_config(), url.host, transport_);
    tls_->handshake(where_);
  }
}

void UpstreamConnection::write_all(std::string_view data) {
  if (tls_) {
    tls_->write_all(data, where_);
  } else {
    send_all_plain(transport_, data, where_);
  }
}

std::size_t UpstreamConnection::read_some(char* data, std::size_t size) {
  return tls_ ? tls_->read_some(data, size, where_) : receive_plain(transport_, data, size, where_);
}

bool UpstreamConnection::has_buffered_input() {
  return tls_ && (mbedtls_ssl_get_bytes_avail(tls_->context()) > 0 ||
                  mbedtls_ssl_check_pending(tls_->context()) != 0);
}

void UpstreamConnection::open_tunnel(const UpstreamUrl& url, const UpstreamUrl& proxy) {
  const auto proxy_where = describe_endpoint(proxy.host, proxy.port);
  const auto authority = describe_endpoint(url.host, url.port);
  send_all_plain(transport_,
                 "CONNECT " + authority + " HTTP/1.1\r\nHost: " + authority + "\r\n\r\n",
                 proxy_where);
  // Byte by byte: nothing of the TLS stream after the proxy's answer may be consumed here.
  std::string head;
  while (!head.ends_with("\r\n\r\n")) {
    char c = 0;
    if (receive_plain(transport_, &c, 1, proxy_where) == 0 || head.size() > 16 * 1024) {
      throw HttpClientError("the proxy " + proxy_where + " gave no usable answer to CONNECT");
    }
    head += c;
  }
  if (head.size() < 12 || !head.starts_with("HTTP/1.") || head.substr(8, 4) != " 200") {
    throw HttpClientError("the proxy " + proxy_where + " refused CONNECT to " + authority + ": " +
                          printable_status_line(head));
  }
}

}  // namespace garm_edge::net
