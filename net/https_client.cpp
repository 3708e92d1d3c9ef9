#include "net/https_client.hpp"

#include <array>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <mbedtls/net_sockets.h>

#include "common/unique_fd.hpp"

namespace garm_edge::net {
namespace {

using Clock = std::chrono::steady_clock;

int remaining_ms(Clock::time_point deadline) {
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left > 0 ? static_cast<int>(left) : 0;
}

/// Non-blocking connect to the first address that answers before the deadline.
int connect_before(const HttpsTarget& target, Clock::time_point deadline) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const auto port = std::to_string(target.port);
  if (const int rc = ::getaddrinfo(target.host.c_str(), port.c_str(), &hints, &found); rc != 0) {
    throw HttpsError("cannot resolve " + target.host + ": " + ::gai_strerror(rc));
  }
  std::string last_error = "no address";
  for (addrinfo* address = found; address != nullptr; address = address->ai_next) {
    const int fd =
        ::socket(address->ai_family, address->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      continue;
    }
    int rc = ::connect(fd, address->ai_addr, address->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd waiting{.fd = fd, .events = POLLOUT, .revents = 0};
      rc = ::poll(&waiting, 1, remaining_ms(deadline));
      int error = rc == 0 ? ETIMEDOUT : 0;
      socklen_t length = sizeof error;
      if (rc > 0) {
        ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length);
      }
      rc = error == 0 ? 0 : -1;
      errno = error;
    }
    if (rc == 0) {
      ::freeaddrinfo(found);
      const int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one,
                   sizeof one);  // no Nagle wait in the handshake
      return fd;
    }
    last_error = std::strerror(errno);
    ::close(fd);
  }
  ::freeaddrinfo(found);
  throw HttpsError("cannot connect to " + target.host + ":" + std::to_string(target.port) + ": " +
                   last_error);
}

struct Transport {
  int fd;
  Clock::time_point deadline;
};

int wait_ready(const Transport& transport, short events) {
  pollfd waiting{.fd = transport.fd, .events = events, .revents = 0};
  const int rc = ::poll(&waiting, 1, remaining_ms(transport.deadline));
  return rc > 0 ? 0 : MBEDTLS_ERR_SSL_TIMEOUT;
}

int send_with_deadline(void* context, const unsigned char* data, std::size_t size) {
  auto* transport = static_cast<Transport*>(context);
  while (true) {
    const ssize_t sent = ::send(transport->fd, data, size, MSG_NOSIGNAL);
    if (sent >= 0) {
      return static_cast<int>(sent);
    }
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
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
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      return MBEDTLS_ERR_NET_RECV_FAILED;
    }
    if (const int rc = wait_ready(*transport, POLLIN); rc != 0) {
      return rc;
    }
  }
}

class Ssl {
 public:
  Ssl() {
    mbedtls_ssl_init(&ssl_);
    mbedtls_ssl_session_init(&session_);
  }
  ~Ssl() {
    mbedtls_ssl_session_free(&session_);
    mbedtls_ssl_free(&ssl_);
  }
  Ssl(const Ssl&) = delete;
  Ssl& operator=(const Ssl&) = delete;
  mbedtls_ssl_context* get() { return &ssl_; }
  mbedtls_ssl_session* session() { return &session_; }

 private:
  mbedtls_ssl_context ssl_;
  mbedtls_ssl_session session_;
};

/// A saved session lets the next process skip the public-key work of a full handshake. The
/// file holds the session's master secret: it is written 0600 and only read back.
void load_session(Ssl& ssl, const std::filesystem::path& file) {
  if (file.empty()) {
    return;
  }
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    return;
  }
  // Only a session this user wrote, private to it: a planted file must not steer the handshake.
  struct stat info {};
  if (::fstat(fd, &info) != 0 || info.st_uid != ::geteuid() || (info.st_mode & 077) != 0 ||
      !S_ISREG(info.st_mode)) {
    ::close(fd);
    return;
  }
  std::array<unsigned char, 4096> buffer{};
  const ssize_t got = ::read(fd, buffer.data(), buffer.size());
  ::close(fd);
  if (got > 0 &&
      mbedtls_ssl_session_load(ssl.session(), buffer.data(), static_cast<std::size_t>(got)) == 0) {
    mbedtls_ssl_set_session(ssl.get(), ssl.session());
  }
}

void save_session(Ssl& ssl, const std::filesystem::path& file) {
  if (file.empty()) {
    return;
  }
  mbedtls_ssl_session session;
  mbedtls_ssl_session_init(&session);
  std::array<unsigned char, 4096> buffer{};
  std::size_t length = 0;
  if (mbedtls_ssl_get_session(ssl.get(), &session) == 0 &&
      mbedtls_ssl_session_save(&session, buffer.data(), buffer.size(), &length) == 0) {
    const auto temp = file.string() + ".tmp." + std::to_string(::getpid());
    const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd >= 0) {
      const bool written = ::write(fd, buffer.data(), length) == static_cast<ssize_t>(length);
      ::close(fd);
      if (!written || ::rename(temp.c_str(), file.c_str()) != 0) {
        ::unlink(temp.c_str());
      }
    }
  }
  mbedtls_ssl_session_free(&session);
}

HttpsResponse parse_response(const std::string& text) {
  const auto head_end = text.find("\r\n\r\n");
  if (text.compare(0, 9, "HTTP/1.1 ") != 0 || head_end == std::string::npos || text.size() < 12) {
    throw HttpsError("the agent's answer is not HTTP/1.1");
  }
  HttpsResponse response;
  const auto [ptr, ec] = std::from_chars(text.data() + 9, text.data() + 12, response.status);
  if (ec != std::errc() || ptr != text.data() + 12) {
    throw HttpsError("the agent's answer has no status code");
  }
  response.body = text.substr(head_end + 4);
  // The agent always sends Content-Length: a shorter body is a cut-off answer, not a short one.
  const auto head = text.substr(0, head_end);
  if (const auto at = head.find("\r\nContent-Length: "); at != std::string::npos) {
    std::size_t length = 0;
    const char* first = head.data() + at + 18;
    std::from_chars(first, head.data() + head.size(), length);
    if (response.body.size() != length) {
      throw HttpsError("the agent's answer was cut off");
    }
  }
  return response;
}

}  // namespace

HttpsTarget parse_https_url(const std::string& url) {
  constexpr std::string_view kScheme = "https://";
  if (url.compare(0, kScheme.size(), kScheme) != 0) {
    throw HttpsError("agent URL \"" + url + "\" must start with https://");
  }
  auto rest = url.substr(kScheme.size());
  if (!rest.empty() && rest.back() == '/') {
    rest.pop_back();
  }
  HttpsTarget target;
  const auto colon = rest.rfind(':');
  if (colon != std::string::npos && rest.find(']') == std::string::npos) {
    int port = 0;
    const auto [ptr, ec] =
        std::from_chars(rest.data() + colon + 1, rest.data() + rest.size(), port);
    if (ec != std::errc() || ptr != rest.data() + rest.size() || port <= 0 || port > 65535) {
      throw HttpsError("agent URL \"" + url + "\" has a bad port");
    }
    target.port = static_cast<std::uint16_t>(port);
    rest.resize(colon);
  }
  if (rest.empty() || rest.find('/') != std::string::npos) {
    throw HttpsError("agent URL \"" + url + "\" must be https://host[:port]");
  }
  target.host = rest;
  return target;
}

HttpsClient::HttpsClient(HttpsTarget target, std::shared_ptr<const TlsConfig> tls,
                         HttpsClientOptions options)
    : target_(std::move(target)), tls_(std::move(tls)), options_(std::move(options)) {}

HttpsResponse HttpsClient::request(const std::string& method, const std::string& path,
                                   const std::string& body) {
  const auto where = target_.host + ":" + std::to_string(target_.port);
  const UniqueFd socket(connect_before(target_, Clock::now() + options_.connect_timeout));
  Transport transport{socket.get(), Clock::now() + options_.request_timeout};
  Ssl ssl;
  if (const int rc = mbedtls_ssl_setup(ssl.get(), tls_->ssl_config()); rc != 0) {
    throw HttpsError(describe_tls_error("TLS setup", rc));
  }
  // Also the name the agent's certificate must carry: without it mbedTLS checks no name.
  if (const int rc = mbedtls_ssl_set_hostname(ssl.get(), target_.host.c_str()); rc != 0) {
    throw HttpsError(describe_tls_error("TLS host name " + target_.host, rc));
  }
  mbedtls_ssl_set_bio(ssl.get(), &transport, send_with_deadline, receive_with_deadline, nullptr);
  load_session(ssl, options_.session_file);
  if (const int rc = mbedtls_ssl_handshake(ssl.get()); rc != 0) {
    const uint32_t flags = mbedtls_ssl_get_verify_result(ssl.get());
    std::string detail = describe_tls_error("TLS handshake with " + where, rc);
    if (flags != 0 && flags != static_cast<uint32_t>(-1)) {
      std::array<char, 512> text{};
      mbedtls_x509_crt_verify_info(text.data(), text.size(), "", flags);
      detail += " (" + std::string(text.data()) + ")";
    }
    throw HttpsError(detail);
  }
  save_session(ssl, options_.session_file);

  const std::string request =
      method + " " + path + " HTTP/1.1\r\nHost: " + target_.host +
      "\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body;
  for (std::size_t sent = 0; sent < request.size();) {
    const int rc =
        mbedtls_ssl_write(ssl.get(), reinterpret_cast<const unsigned char*>(request.data()) + sent,
                          request.size() - sent);
    if (rc <= 0) {
      throw HttpsError(describe_tls_error("sending to " + where, rc));
    }
    sent += static_cast<std::size_t>(rc);
  }
  std::string answer;
  std::array<unsigned char, 16 * 1024> buffer{};
  constexpr std::size_t kMaxAnswer = 64 * 1024 * 1024;
  while (true) {
    const int rc = mbedtls_ssl_read(ssl.get(), buffer.data(), buffer.size());
    if (rc == 0 || rc == MBEDTLS_ERR_SSL_PEER_CLOSE_NOTIFY) {
      break;
    }
    if (rc < 0) {
      throw HttpsError(describe_tls_error("reading from " + where, rc));
    }
    answer.append(reinterpret_cast<const char*>(buffer.data()), static_cast<std::size_t>(rc));
    if (answer.size() > kMaxAnswer) {
      throw HttpsError("the answer from " + where + " is too large");
    }
  }
  return parse_response(answer);
}

}  // namespace garm_edge::net
