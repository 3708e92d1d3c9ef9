#include "net/tls_dial.hpp"

#include <array>
#include <charconv>
#include <sys/socket.h>

#include "net/http_syntax.hpp"
#include "net/socket_io.hpp"

namespace garm_edge::net {
namespace {

constexpr std::size_t kMaxAnswerBytes = 64 * 1024;

/// The Content-Length of a response head ("HTTP/1.1 ..." up to the blank line), or npos.
std::size_t content_length_of(std::string_view head) {
  std::size_t at = head.find("\r\n");
  while (at != std::string_view::npos && at + 2 < head.size()) {
    const auto next = head.find("\r\n", at + 2);
    const auto line = head.substr(at + 2, next - at - 2);
    constexpr std::string_view kName = "content-length:";
    if (line.size() > kName.size() &&
        http_syntax::equals_ignoring_case(line.substr(0, kName.size()), kName)) {
      auto value = line.substr(kName.size());
      while (!value.empty() && value.front() == ' ') {
        value.remove_prefix(1);
      }
      std::size_t length = 0;
      const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), length);
      return error == std::errc() && end == value.data() + value.size() ? length
                                                                        : std::string_view::npos;
    }
    at = next;
  }
  return std::string_view::npos;
}

asio::ip::tcp protocol_of(int fd) {
  sockaddr_storage address{};
  socklen_t length = sizeof address;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  return address.ss_family == AF_INET6 ? asio::ip::tcp::v6() : asio::ip::tcp::v4();
}

}  // namespace

std::string SessionMemory::get(const std::string& ca_tag) const {
  std::lock_guard lock(mutex_);
  return ca_tag == ca_tag_ ? session_ : std::string();
}

void SessionMemory::put(std::string ca_tag, std::string session) {
  std::lock_guard lock(mutex_);
  ca_tag_ = std::move(ca_tag);
  session_ = std::move(session);
}

TurnedAround dial_and_turn_around(const HttpsTarget& target, std::shared_ptr<const TlsConfig> tls,
                                  const std::string& request,
                                  std::chrono::steady_clock::time_point deadline,
                                  const asio::any_io_executor& executor, SessionMemory* sessions) {
  const auto where = describe_endpoint(target.host, target.port);
  try {
    UniqueFd socket = connect_before(target.host, target.port, deadline);
    Transport transport{socket.get(), deadline};
    TlsSession ssl(tls->ssl_config(), target.host, transport);
    const bool offered = sessions != nullptr && ssl.offer_session(sessions->get(tls->ca_tag()));
    ssl.handshake(where);
    // A resumed session's certificate was verified when the session was made: only what can
    // have changed since is checked (dates, today's CRL).
    if (offered && !tls->still_accepts(mbedtls_ssl_get_peer_cert(ssl.context()))) {
      throw HttpsError(where + " shows a certificate that is revoked or no longer trusted");
    }
    if (sessions != nullptr) {
      sessions->put(tls->ca_tag(), ssl.session_bytes());
    }
    ssl.write_all(request, where);
    std::string answer;
    std::array<char, 4096> buffer{};
    std::size_t head_end = std::string::npos;
    std::size_t length = 0;
    while (head_end == std::string::npos || answer.size() < head_end + 4 + length) {
      const auto got = ssl.read_some(buffer.data(), buffer.size(), where);
      if (got == 0) {
        throw HttpsError(where + " closed the connection before its answer was whole");
      }
      answer.append(buffer.data(), got);
      if (answer.size() > kMaxAnswerBytes) {
        throw HttpsError("the answer from " + where + " is too large");
      }
      if (head_end == std::string::npos &&
          (head_end = answer.find("\r\n\r\n")) != std::string::npos) {
        length = content_length_of(std::string_view(answer).substr(0, head_end));
        if (length == std::string::npos || answer.compare(0, 9, "HTTP/1.1 ") != 0) {
          throw HttpsError("the answer from " + where + " is not HTTP/1.1 with a Content-Length");
        }
      }
    }
    TurnedAround result;
    if (std::from_chars(answer.data() + 9, answer.data() + 12, result.status).ec != std::errc()) {
      throw HttpsError("the answer from " + where + " has no status code");
    }
    const auto body_end = head_end + 4 + length;
    result.body = answer.substr(head_end + 4, length);
    if (result.status == 200) {
      const int fd = socket.get();
      auto stream = std::make_shared<TlsStream>(TlsStream{.socket = asio::ip::tcp::socket(executor),
                                                          .tls = std::move(tls),
                                                          .ssl = ssl.release(),
                                                          .peer = {},
                                                          .early_bytes = answer.substr(body_end)});
      stream->peer = identity_of(mbedtls_ssl_get_peer_cert(stream->ssl.get()));
      stream->socket.assign(protocol_of(fd), socket.release());
      result.stream = std::move(stream);
    }
    return result;
  } catch (const TransportError& e) {
    throw HttpsError(e.what(), false);
  }
}

}  // namespace garm_edge::net
