#include "net/https_client.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <fcntl.h>
#include <optional>
#include <string_view>
#include <sys/stat.h>
#include <unistd.h>

#include "common/unique_fd.hpp"
#include "net/secret_token.hpp"
#include "net/socket_io.hpp"
#include "net/tls_stream.hpp"

namespace garm_edge::net {
namespace {

/// A saved session lets the next process skip the public-key work of a full handshake. The
/// file holds the session's master secret: it is written 0600 and only read back. Its first
/// line says what the full handshake that made it verified: the host it was made for, the CA
/// it was verified against (TlsConfig::ca_tag) and the SHA-256 of the peer's certificate.
constexpr std::string_view kSessionMagic = "garm-edge-session 2 ";

std::string peer_fingerprint(const mbedtls_x509_crt* peer) {
  return peer == nullptr ? std::string()
                         : sha256_hex({reinterpret_cast<const char*>(peer->raw.p), peer->raw.len});
}

std::string session_header(const TlsConfig& tls, const std::string& host, const std::string& peer) {
  return std::string(kSessionMagic) + tls.ca_tag() + " " + peer + " " + host + "\n";
}

/// The file as read (to tell whether it needs writing again) and the peer it vouches for.
struct LoadedSession {
  std::string file;
  std::string peer;
};

/// Offers the saved session when it was made for this host under this CA.
std::optional<LoadedSession> load_session(TlsSession& ssl, const std::filesystem::path& file,
                                          const TlsConfig& tls, const std::string& host) {
  if (file.empty()) {
    return std::nullopt;
  }
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    return std::nullopt;
  }
  // Only a session this user wrote, private to it: a planted file must not steer the handshake.
  struct stat info {};
  if (::fstat(fd, &info) != 0 || info.st_uid != ::geteuid() || (info.st_mode & 077) != 0 ||
      !S_ISREG(info.st_mode)) {
    ::close(fd);
    return std::nullopt;
  }
  std::array<char, 4096> buffer{};
  const ssize_t got = ::read(fd, buffer.data(), buffer.size());
  ::close(fd);
  const std::string_view text(buffer.data(), got > 0 ? static_cast<std::size_t>(got) : 0);
  const auto line_end = text.find('\n');
  if (!text.starts_with(kSessionMagic) || line_end == std::string_view::npos) {
    return std::nullopt;  // none, or one from before the header: a full handshake
  }
  const auto fields = text.substr(kSessionMagic.size(), line_end - kSessionMagic.size());
  const auto first_space = fields.find(' ');
  const auto second_space = fields.find(' ', first_space + 1);
  if (first_space == std::string_view::npos || second_space == std::string_view::npos ||
      fields.substr(0, first_space) != tls.ca_tag() || fields.substr(second_space + 1) != host) {
    return std::nullopt;  // made under another CA or for another host
  }
  if (!ssl.offer_session(text.substr(line_end + 1))) {
    return std::nullopt;
  }
  return LoadedSession{
      .file = std::string(text),
      .peer = std::string(fields.substr(first_space + 1, second_space - first_space - 1))};
}

/// Writes the session unless the file holds it already (a resumed session): rewriting the same
/// bytes costs a file creation and a rename per call, a fifth of a fleet-wide list.
void save_session(TlsSession& ssl, const std::filesystem::path& file,
                  const std::optional<LoadedSession>& loaded, const std::string& header) {
  const auto session = ssl.session_bytes();
  if (file.empty() || session.empty()) {
    return;
  }
  const auto contents = header + session;
  if (loaded && loaded->file == contents) {
    return;
  }
  // Per thread: a provider probing many agents at once may save two sessions of one agent.
  const auto temp = file.string() + ".tmp." + std::to_string(::gettid());
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    return;
  }
  const bool written =
      ::write(fd, contents.data(), contents.size()) == static_cast<ssize_t>(contents.size());
  ::close(fd);
  if (!written || ::rename(temp.c_str(), file.c_str()) != 0) {
    ::unlink(temp.c_str());
  }
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
  const auto loaded = load_session(ssl, session_file, tls, target.host);
  const std::string request =
      method + " " + path + " HTTP/1.1\r\nHost: " + where +
      "\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body;
  try {
    ssl.handshake(where);
    // A resumed session skips the certificate checks of a full handshake. Its certificate was
    // verified in full when the session was made, under the same CA (the file says which): it
    // is checked again only for what can have changed since, its dates and today's CRL (a host
    // revoked since must not resume). Another certificate means the agent did not resume, and
    // the handshake verified it in full.
    const auto* peer = mbedtls_ssl_get_peer_cert(ssl.context());
    const auto fingerprint = peer_fingerprint(peer);
    const bool rechecked = tls.still_accepts(peer);
    if (loaded && fingerprint == loaded->peer && !rechecked) {
      ::unlink(session_file.c_str());  // the next call verifies in full
      throw TransportError(where + " shows a certificate that is revoked or no longer trusted");
    }
    if (options.check_peer) {
      if (const auto refusal =
              options.check_peer(identity_of(mbedtls_ssl_get_peer_cert(ssl.context())))) {
        throw TransportError(where + " shows " + *refusal);
      }
    }
    // Only a session whose certificate a resume can check again (issued by one of the CAs
    // themselves, not through an intermediate) is kept: else every resume would be refused.
    if (rechecked) {
      save_session(ssl, session_file, loaded, session_header(tls, target.host, fingerprint));
    }
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
