#include "net/socket_io.hpp"

#include <algorithm>
#include <arpa/inet.h>
#include <array>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <memory>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <vector>

#include <mbedtls/net_sockets.h>

#include "net/tls_config.hpp"

namespace garm_edge::net {
namespace {

int remaining_ms(SteadyClock::time_point deadline) {
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - SteadyClock::now()).count();
  return left > 0 ? static_cast<int>(left) : 0;
}

/// poll() on one socket until the deadline; a signal does not cut the wait short.
int poll_until(int fd, short events, SteadyClock::time_point deadline) {
  while (true) {
    pollfd waiting{.fd = fd, .events = events, .revents = 0};
    const int rc = ::poll(&waiting, 1, remaining_ms(deadline));
    if (rc >= 0 || errno != EINTR) {
      return rc;
    }
  }
}

/// 0 once the socket is ready for `events`, MBEDTLS_ERR_SSL_TIMEOUT at the deadline or once
/// the transport's stop switch is thrown.
int wait_ready(const Transport& transport, short events) {
  if (transport.stop == nullptr) {
    return poll_until(transport.fd, events, transport.deadline) > 0 ? 0 : MBEDTLS_ERR_SSL_TIMEOUT;
  }
  while (!*transport.stop) {
    const auto slice = std::min(transport.deadline, SteadyClock::now() + kStopPollInterval);
    const int rc = poll_until(transport.fd, events, slice);
    if (rc != 0) {
      return rc > 0 ? 0 : MBEDTLS_ERR_SSL_TIMEOUT;
    }
    if (SteadyClock::now() >= transport.deadline) {
      break;
    }
  }
  return MBEDTLS_ERR_SSL_TIMEOUT;
}

/// The address `host` is when it is an IP literal (4 or 16 bytes in network order), else "".
std::string ip_literal_bytes(const std::string& host) {
  std::array<unsigned char, 16> bytes{};
  if (::inet_pton(AF_INET, host.c_str(), bytes.data()) == 1) {
    return {reinterpret_cast<const char*>(bytes.data()), 4};
  }
  if (::inet_pton(AF_INET6, host.c_str(), bytes.data()) == 1) {
    return {reinterpret_cast<const char*>(bytes.data()), 16};
  }
  return {};
}

/// mbedTLS 2.28 checks a host name against DNS names and the CN only: for an address, the
/// leaf certificate must carry it as an iPAddress SAN, or verification fails as a name mismatch.
int verify_address_san(void* expected, mbedtls_x509_crt* certificate, int depth, uint32_t* flags) {
  if (depth != 0) {
    return 0;
  }
  const auto& address = *static_cast<const std::string*>(expected);
  constexpr int kIpAddress = 7;  // GeneralName [7] iPAddress, RFC 5280 4.2.1.6
  for (const mbedtls_x509_sequence* san = &certificate->subject_alt_names; san != nullptr;
       san = san->next) {
    if (san->buf.p != nullptr &&
        (san->buf.tag & MBEDTLS_ASN1_TAG_CLASS_MASK) == MBEDTLS_ASN1_CONTEXT_SPECIFIC &&
        (san->buf.tag & MBEDTLS_ASN1_TAG_VALUE_MASK) == kIpAddress &&
        san->buf.len == address.size() &&
        std::memcmp(san->buf.p, address.data(), address.size()) == 0) {
      return 0;
    }
  }
  *flags |= MBEDTLS_X509_BADCERT_CN_MISMATCH;
  return 0;
}

bool would_block(int error) {
  return error == EAGAIN || error == EWOULDBLOCK || error == EINTR;
}

/// 0 when connected before the deadline, else the errno that says why not.
int finish_connect(int fd, SteadyClock::time_point deadline) {
  const int rc = poll_until(fd, POLLOUT, deadline);
  if (rc == 0) {
    return ETIMEDOUT;
  }
  if (rc < 0) {
    return errno;
  }
  int error = 0;
  socklen_t length = sizeof error;
  ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length);
  return error;
}

/// 0 when `address` accepted the connection, else the errno.
int connect_to(int fd, const addrinfo& address, SteadyClock::time_point deadline) {
  if (::connect(fd, address.ai_addr, address.ai_addrlen) == 0) {
    return 0;
  }
  return errno == EINPROGRESS ? finish_connect(fd, deadline) : errno;
}

bool is_localhost(std::string_view host) {
  const auto lower = [](std::string_view text) {
    std::string out(text);
    for (auto& c : out) {
      c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
    return out;
  };
  const auto name = lower(host);
  return name == "localhost" || name == "localhost." || name.ends_with(".localhost") ||
         name.ends_with(".localhost.");
}

}  // namespace

std::string describe_endpoint(const std::string& host, std::uint16_t port) {
  const bool ipv6 = host.find(':') != std::string::npos;
  return (ipv6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

UniqueFd connect_before(const std::string& host, std::uint16_t port,
                        SteadyClock::time_point deadline) {
  // As curl does (RFC 6761 6.3): never asked of a resolver, so it works without /etc/hosts.
  const bool loopback = is_localhost(host);
  const std::vector<std::string> names =
      loopback ? std::vector<std::string>{"127.0.0.1", "::1"} : std::vector<std::string>{host};
  std::string last_error = "no address";
  for (const auto& name : names) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = loopback ? AI_NUMERICHOST : 0;
    addrinfo* found = nullptr;
    const auto service = std::to_string(port);
    if (const int rc = ::getaddrinfo(name.c_str(), service.c_str(), &hints, &found); rc != 0) {
      last_error = std::string("cannot resolve ") + host + ": " + ::gai_strerror(rc);
      continue;
    }
    const std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> addresses(found, ::freeaddrinfo);
    for (addrinfo* address = found; address != nullptr; address = address->ai_next) {
      UniqueFd fd(
          ::socket(address->ai_family, address->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
      if (fd.get() < 0) {
        continue;
      }
      if (const int error = connect_to(fd.get(), *address, deadline); error != 0) {
        last_error = std::strerror(error);
        continue;
      }
      const int one = 1;
      // No Nagle wait between the small writes of a handshake or a request head.
      ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      return fd;
    }
  }
  if (last_error.starts_with("cannot resolve")) {
    throw TransportError(last_error);
  }
  throw TransportError("cannot connect to " + describe_endpoint(host, port) + ": " + last_error);
}

UniqueFd connect_unix_before(const std::string& path, SteadyClock::time_point deadline) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof address.sun_path) {
    throw TransportError("cannot connect to " + path + ": not a unix socket path (at most " +
                         std::to_string(sizeof address.sun_path - 1) + " bytes)");
  }
  std::copy(path.begin(), path.end(), address.sun_path);
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) {
    throw TransportError("cannot connect to " + path + ": " + std::strerror(errno));
  }
  int error = 0;
  // EAGAIN on a unix socket is a full listen backlog, not a connection under way: try again
  // until the deadline.
  while (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) {
    error = errno;
    if (error != EAGAIN || SteadyClock::now() >= deadline) {
      error = error == EINPROGRESS ? finish_connect(fd.get(), deadline) : error;
      break;
    }
    ::usleep(2000);
    error = 0;
  }
  if (error != 0) {
    throw TransportError("cannot connect to " + path + ": " + std::strerror(error));
  }
  return fd;
}

int send_with_deadline(void* context, const unsigned char* data, std::size_t size) {
  auto* transport = static_cast<Transport*>(context);
  while (true) {
    const ssize_t sent = ::send(transport->fd, data, size, MSG_NOSIGNAL);
    if (sent >= 0) {
      return static_cast<int>(sent);
    }
    if (!would_block(errno)) {
      return MBEDTLS_ERR_NET_SEND_FAILED;
    }
    if (const int rc = wait_ready(*transport, POLLOUT); rc != 0) {
      return rc;
    }
  }
}

int receive_with_deadline(void* context, unsigned char* data, std::size_t size) {
  auto* transport = static_cast<Transport*>(context);
  while (true) {
    const ssize_t got = ::recv(transport->fd, data, size, 0);
    if (got >= 0) {
      return static_cast<int>(got);
    }
    if (!would_block(errno)) {
      return MBEDTLS_ERR_NET_RECV_FAILED;
    }
    if (const int rc = wait_ready(*transport, POLLIN); rc != 0) {
      return rc;
    }
  }
}

void send_all_plain(Transport& transport, std::string_view data, const std::string& where) {
  while (!data.empty()) {
    const int rc = send_with_deadline(
        &transport, reinterpret_cast<const unsigned char*>(data.data()), data.size());
    if (rc == MBEDTLS_ERR_SSL_TIMEOUT) {
      throw TransportError("sending to " + where + ": timed out");
    }
    if (rc < 0) {
      throw TransportError("sending to " + where + ": " + std::strerror(errno));
    }
    data.remove_prefix(static_cast<std::size_t>(rc));
  }
}

std::size_t receive_plain(Transport& transport, char* data, std::size_t size,
                          const std::string& where) {
  const int rc = receive_with_deadline(&transport, reinterpret_cast<unsigned char*>(data), size);
  if (rc == MBEDTLS_ERR_SSL_TIMEOUT) {
    throw TransportError("reading from " + where + ": timed out");
  }
  if (rc < 0) {
    throw TransportError("reading from " + where + ": " + std::strerror(errno));
  }
  return static_cast<std::size_t>(rc);
}

TlsSession::TlsSession(const mbedtls_ssl_config* config, const std::string& host,
                       Transport& transport)
    : expected_address_(ip_literal_bytes(host)) {
  if (const int rc = mbedtls_ssl_setup(ssl_.get(), config); rc != 0) {
    throw TransportError(describe_tls_error("TLS setup", rc));
  }
  if (expected_address_.empty()) {
    if (const int rc = mbedtls_ssl_set_hostname(ssl_.get(), host.c_str()); rc != 0) {
      throw TransportError(describe_tls_error("TLS host name " + host, rc));
    }
  } else {
    mbedtls_ssl_set_verify(ssl_.get(), verify_address_san, &expected_address_);
  }
  mbedtls_ssl_set_bio(ssl_.get(), &transport, send_with_deadline, receive_with_deadline, nullptr);
}

TlsSession::~TlsSession() = default;

bool TlsSession::offer_session(std::string_view saved) {
  if (saved.empty()) {
    return false;
  }
  mbedtls_ssl_session session;
  mbedtls_ssl_session_init(&session);
  // mbedtls_ssl_set_session copies the session, certificate included.
  const bool offered =
      mbedtls_ssl_session_load(&session, reinterpret_cast<const unsigned char*>(saved.data()),
                               saved.size()) == 0 &&
      mbedtls_ssl_set_session(ssl_.get(), &session) == 0;
  mbedtls_ssl_session_free(&session);
  return offered;
}

std::string TlsSession::session_bytes() {
  mbedtls_ssl_session session;
  mbedtls_ssl_session_init(&session);
  std::array<unsigned char, 4096> buffer{};
  std::size_t length = 0;
  std::string saved;
  if (mbedtls_ssl_get_session(ssl_.get(), &session) == 0 &&
      mbedtls_ssl_session_save(&session, buffer.data(), buffer.size(), &length) == 0) {
    saved.assign(reinterpret_cast<const char*>(buffer.data()), length);
  }
  mbedtls_ssl_session_free(&session);
  return saved;
}

SslContextPtr TlsSession::release() {
  // Nothing of this object may be reached through the context once it changes hands.
  mbedtls_ssl_set_verify(ssl_.get(), nullptr, nullptr);
  mbedtls_ssl_set_bio(ssl_.get(), nullptr, nullptr, nullptr, nullptr);
  return std::move(ssl_);
}

void TlsSession::handshake(const std::string& where) {
  const int rc = mbedtls_ssl_handshake(ssl_.get());
  if (rc == 0) {
    return;
  }
  std::string detail = describe_tls_error("TLS handshake with " + where, rc);
  // -1 means no certificate was verified at all (the handshake failed before that).
  if (const uint32_t flags = mbedtls_ssl_get_verify_result(ssl_.get());
      flags != 0 && flags != static_cast<uint32_t>(-1)) {
    std::array<char, 512> text{};
    mbedtls_x509_crt_verify_info(text.data(), text.size(), "", flags);
    std::string reasons(text.data());
    while (!reasons.empty() && reasons.back() == '\n') {
      reasons.pop_back();
    }
    if (!expected_address_.empty() && (flags & MBEDTLS_X509_BADCERT_CN_MISMATCH) != 0) {
      reasons += "; the address is not among the certificate's IP SANs";
    }
    detail += " (" + reasons + ")";
  }
  throw TransportError(detail);
}

void TlsSession::write_all(std::string_view data, const std::string& where) {
  while (!data.empty()) {
    const int rc = mbedtls_ssl_write(
        ssl_.get(), reinterpret_cast<const unsigned char*>(data.data()), data.size());
    if (rc <= 0) {
      throw TransportError(describe_tls_error("sending to " + where, rc));
    }
    data.remove_prefix(static_cast<std::size_t>(rc));
  }
}

std::size_t TlsSession::read_some(char* data, std::size_t size, const std::string& where) {
  const int rc = mbedtls_ssl_read(ssl_.get(), reinterpret_cast<unsigned char*>(data), size);
  if (rc == MBEDTLS_ERR_SSL_PEER_CLOSE_NOTIFY) {
    closed_cleanly_ = true;
    return 0;
  }
  if (rc < 0) {
    throw TransportError(describe_tls_error("reading from " + where, rc));
  }
  return static_cast<std::size_t>(rc);
}

}  // namespace garm_edge::net
