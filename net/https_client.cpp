#include "net/https_client.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/unique_fd.hpp"
#include "net/socket_io.hpp"
#include "net/tls_stream.hpp"

namespace garm_edge::net {
namespace {

/// A saved session lets the next process skip the public-key work of a full handshake. The
/// file holds the session's master secret: it is written 0600 and only read back. Returns the
/// bytes it loaded (empty: none).
std::string load_session(TlsSession& ssl, const std::filesystem::path& file) {
  if (file.empty()) {
    return {};
  }
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    return {};
  }
  // Only a session this user wrote, private to it: a planted file must not steer the handshake.
  struct stat info {};
  if (::fstat(fd, &info) != 0 || info.st_uid != ::geteuid() || (info.st_mode & 077) != 0 ||
      !S_ISREG(info.st_mode)) {
    ::close(fd);
    return {};
  }
  std::array<unsigned char, 4096> buffer{};
  const ssize_t got = ::read(fd, buffer.data(), buffer.size());
  ::close(fd);
  if (got > 0 && mbedtls_ssl_session_load(ssl.resumable_session(), buffer.data(),
                                          static_cast<std::size_t>(got)) == 0) {
    mbedtls_ssl_set_session(ssl.context(), ssl.resumable_session());
    return {reinterpret_cast<const char*>(buffer.data()), static_cast<std::size_t>(got)};
  }
  return {};
}

/// Writes the session unless it is the one `loaded` (a resumed session): rewriting the same
/// bytes costs a file creation and a rename per call, a fifth of a fleet-wide list.
void save_session(TlsSession& ssl, const std::filesystem::path& file, const std::string& loaded) {
  if (file.empty()) {
    return;
  }
  mbedtls_ssl_session session;
  mbedtls_ssl_session_init(&session);
  std::array<unsigned char, 4096> buffer{};
  std::size_t length = 0;
  if (mbedtls_ssl_get_session(ssl.context(), &session) == 0 &&
      mbedtls_ssl_session_save(&session, buffer.data(), buffer.size(), &length) == 0 &&
      std::string_view(reinterpret_cast<const char*>(buffer.data()), length) != loaded) {
    // Per thread: a provider probing many agents at once may save two sessions of one agent.
    const auto temp = file.string() + ".tmp." + std::to_string(::gettid());
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
  if (text.empty()) {
    throw HttpsError("the connection was closed before an answer came");
  }
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

/// One exchange; errors of the shared socket steps arrive as TransportError.
HttpsResponse exchange(const HttpsTarget& target, const TlsConfig& tls,
                       const HttpsClientOptions& options, const std::string& method,
                       const std::string& path, const std::string& body) {
  const auto where = describe_endpoint(target.host, target.port);
  const auto within_deadline = [&options](SteadyClock::time_point at) {
    return options.deadline ? std::min(at, *options.deadline) : at;
  };
  const UniqueFd socket = [&] {
    try {
      return connect_before(target.host, target.port,
                            within_deadline(SteadyClock::now() + options.connect_timeout));
    } catch (const TransportError& e) {
      throw HttpsError(e.what(), false);
    }
  }();
  // The handshake has the connect timeout: an agent that accepts and then hangs must not hold a
  // long call (a create) for its whole request timeout before anything was asked of it.
  Transport transport{socket.get(), within_deadline(SteadyClock::now() + options.connect_timeout)};
  // The host name is also the name the agent's certificate must carry.
  TlsSession ssl(tls.ssl_config(), target.host, transport);
  // A session resumes the identity of the handshake that made it: one saved under another
  // certificate (garm's, where the operator now calls with its own) must never be offered.
  auto session_file = options.session_file;
  if (!session_file.empty()) {
    const auto kind = session_file.extension();
    session_file.replace_extension().concat("." + tls.own_tag()).concat(kind.string());
  }
  const auto loaded = load_session(ssl, session_file);
  const std::string request =
      method + " " + path + " HTTP/1.1\r\nHost: " + where +
      "\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body;
  try {
    ssl.handshake(where);
    // A resumed session skips the certificate checks of a full handshake: its certificate is
    // checked again against today's CA and CRL (a host revoked since must not resume).
    if (!loaded.empty() && !tls.accepts(mbedtls_ssl_get_peer_cert(ssl.context()))) {
      throw TransportError(where + " shows a certificate that is revoked or no longer trusted");
    }
    if (options.check_peer) {
      if (const auto refusal =
              options.check_peer(identity_of(mbedtls_ssl_get_peer_cert(ssl.context())))) {
        throw TransportError(where + " shows " + *refusal);
      }
    }
    save_session(ssl, session_file, loaded);
    transport.deadline = within_deadline(SteadyClock::now() + options.request_timeout);
    // Until the whole request is out, the agent cannot have acted on it (it reads a request
    // whole, by Content-Length, before it runs it).
    ssl.write_all(request, where);
  } catch (const TransportError& e) {
    throw HttpsError(e.what(), false);
  }
  std::string answer;
  std::array<char, 16 * 1024> buffer{};
  constexpr std::size_t kMaxAnswer = 64 * 1024 * 1024;
  while (const std::size_t got = ssl.read_some(buffer.data(), buffer.size(), where)) {
    answer.append(buffer.data(), got);
    if (answer.size() > kMaxAnswer) {
      throw HttpsError("the answer from " + where + " is too large");
    }
  }
  return parse_response(answer);
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
  // An IPv6 address is written in brackets, so that its colons are not taken for the port's.
  std::string port_text;
  if (!rest.empty() && rest.front() == '[') {
    const auto close = rest.find(']');
    if (close == std::string::npos || (close + 1 < rest.size() && rest[close + 1] != ':')) {
      throw HttpsError("agent URL \"" + url + "\" must be https://[address][:port]");
    }
    port_text = close + 1 < rest.size() ? rest.substr(close + 2) : "";
    if (close + 1 < rest.size() && port_text.empty()) {
      throw HttpsError("agent URL \"" + url + "\" has a bad port");
    }
    rest = rest.substr(1, close - 1);
    if (rest.find(':') == std::string::npos) {
      throw HttpsError("agent URL \"" + url + "\" has brackets around something not IPv6");
    }
  } else if (const auto colon = rest.rfind(':'); colon != std::string::npos) {
    port_text = rest.substr(colon + 1);
    if (port_text.empty()) {
      throw HttpsError("agent URL \"" + url + "\" has a bad port");
    }
    rest.resize(colon);
  }
  if (!port_text.empty()) {
    int port = 0;
    const auto [ptr, ec] =
        std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
    if (ec != std::errc() || ptr != port_text.data() + port_text.size() || port <= 0 ||
        port > 65535) {
      throw HttpsError("agent URL \"" + url + "\" has a bad port");
    }
    target.port = static_cast<std::uint16_t>(port);
  }
  if (rest.empty() || rest.find_first_of("/[]@?#") != std::string::npos) {
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
  try {
    return exchange(target_, *tls_, options_, method, path, body);
  } catch (const TransportError& e) {
    throw HttpsError(e.what());
  }
}

}  // namespace garm_edge::net
