#include "net/http_client.hpp"

#include <algorithm>
#include <arpa/inet.h>
#include <array>
#include <netinet/in.h>

#include "common/unique_fd.hpp"
#include "net/http_syntax.hpp"
#include "net/socket_io.hpp"
#include "net/upstream_connection.hpp"

namespace garm_edge::net {
namespace {

using http_syntax::equals_ignoring_case;
using http_syntax::is_alpha;
using http_syntax::is_digit;
using http_syntax::is_hex_digit;
using http_syntax::is_target_char;
using http_syntax::is_token;
using http_syntax::lower;
using http_syntax::parse_decimal;

[[noreturn]] void refuse_url(const std::string& why) {
  // The URL itself is never quoted: it may carry credentials where they do not belong.
  throw HttpClientError("upstream URL: " + why);
}

// ---- URL -------------------------------------------------------------------------------------

bool is_path_char(char c) {
  return is_alpha(c) || is_digit(c) ||
         std::string_view("-._~!$&'()*+,;=:@/%").find(c) != std::string_view::npos;
}

void check_path(std::string_view path) {
  for (std::size_t i = 0; i < path.size(); ++i) {
    if (!is_path_char(path[i])) {
      refuse_url("the path may hold only RFC 3986 path characters");
    }
    if (path[i] == '%' &&
        (i + 2 >= path.size() || !is_hex_digit(path[i + 1]) || !is_hex_digit(path[i + 2]))) {
      refuse_url("a % in the path must start a %XX escape");
    }
  }
}

std::uint16_t parse_port(std::string_view text) {
  const auto port = parse_decimal(text, 5);
  if (!port || *port == 0 || *port > 65535) {
    refuse_url("the port must be a number from 1 to 65535");
  }
  return static_cast<std::uint16_t>(*port);
}

bool is_host_name(std::string_view host) {
  return !host.empty() && host.size() <= 253 && std::all_of(host.begin(), host.end(), [](char c) {
    return is_alpha(c) || is_digit(c) || c == '-' || c == '.' || c == '_';
  });
}

/// Fills host and port from "host[:port]" or "[v6][:port]".
void parse_authority(std::string_view authority, UpstreamUrl& url) {
  std::string_view port_part;
  bool has_port = false;
  if (authority.starts_with('[')) {
    const auto close = authority.find(']');
    if (close == std::string_view::npos) {
      refuse_url("an IPv6 address must be closed with ]");
    }
    url.host = authority.substr(1, close - 1);
    in6_addr address{};
    if (::inet_pton(AF_INET6, url.host.c_str(), &address) != 1) {
      refuse_url("the address in brackets is not an IPv6 address");
    }
    const auto after = authority.substr(close + 1);
    if (!after.empty() && !after.starts_with(':')) {
      refuse_url("only a port may follow an IPv6 address");
    }
    has_port = !after.empty();
    port_part = has_port ? after.substr(1) : after;
  } else {
    const auto colon = authority.find(':');
    url.host = authority.substr(0, colon);
    has_port = colon != std::string_view::npos;
    port_part = has_port ? authority.substr(colon + 1) : std::string_view();
    if (!is_host_name(url.host)) {
      refuse_url("the host must be a DNS name, an IPv4 address or a bracketed IPv6 address");
    }
  }
  if (has_port) {
    url.port = parse_port(port_part);
  }
}

// ---- request ---------------------------------------------------------------------------------

/// Headers whose values decide the framing of the exchange: only the client may set them.
bool is_clients_own_header(std::string_view name) {
  for (const std::string_view own : {"host", "content-length", "transfer-encoding", "connection"}) {
    if (equals_ignoring_case(name, own)) {
      return true;
    }
  }
  return false;
}

void check_request_header(std::string_view name, std::string_view value) {
  if (!is_token(name)) {
    throw HttpClientError("request: a header name is not an HTTP token");
  }
  if (is_clients_own_header(name)) {
    throw HttpClientError("request: header " + std::string(name) + " is set by the client itself");
  }
  if (value.find_first_of(std::string_view("\r\n\0", 3)) != std::string_view::npos) {
    throw HttpClientError("request: the value of header " + std::string(name) +
                          " holds CR, LF or NUL");
  }
}

void check_request_line(const ClientRequest& request) {
  if (!is_token(request.method)) {
    throw HttpClientError("request: the method is not an HTTP token");
  }
  const bool printable = std::all_of(request.target.begin(), request.target.end(), is_target_char);
  if (!request.target.starts_with('/') || !printable) {
    throw HttpClientError("request: the target must be a path (and query) in printable ASCII");
  }
}

std::string host_header(const UpstreamUrl& url) {
  const bool ipv6 = url.host.find(':') != std::string::npos;
  std::string host = ipv6 ? "[" + url.host + "]" : url.host;
  const std::uint16_t default_port = url.tls ? 443 : 80;
  return url.port == default_port ? host : host + ":" + std::to_string(url.port);
}

bool always_sends_length(std::string_view method) {
  return method == "POST" || method == "PUT" || method == "PATCH";
}

// ---- proxy ------------------------------------------------------------------------------------

/// An IPv4 or IPv6 literal as its bytes (4 or 16); empty for a name.
std::string address_bytes(const std::string& text) {
  in6_addr v6{};
  if (::inet_pton(AF_INET6, text.c_str(), &v6) == 1) {
    return {reinterpret_cast<const char*>(&v6), sizeof v6};
  }
  in_addr v4{};
  if (::inet_pton(AF_INET, text.c_str(), &v4) == 1) {
    return {reinterpret_cast<const char*>(&v4), sizeof v4};
  }
  return {};
}

/// Does the address `host` (its bytes) fall in `entry`, an address or address/prefix-length?
bool address_matches(const std::string& host, std::string_view entry) {
  const auto slash = entry.find('/');
  const auto network = address_bytes(std::string(entry.substr(0, slash)));
  if (network.empty() || network.size() != host.size()) {
    return false;
  }
  std::size_t bits = host.size() * 8;
  if (slash != std::string_view::npos) {
    const auto prefix = http_syntax::parse_decimal(entry.substr(slash + 1), 3);
    if (!prefix || *prefix > bits) {
      return false;
    }
    bits = static_cast<std::size_t>(*prefix);
  }
  for (std::size_t i = 0; i < bits; ++i) {
    const auto mask = static_cast<unsigned>(0x80U >> (i % 8));
    if ((static_cast<unsigned char>(host[i / 8]) & mask) !=
        (static_cast<unsigned char>(network[i / 8]) & mask)) {
      return false;
    }
  }
  return true;
}

/// curl's no_proxy rules: "*" alone matches everything; an address entry (or address/prefix,
/// as curl 7.86 reads it) matches addresses; a name entry matches the name itself and, as a
/// domain, every name below it (a leading dot is optional); ports and case are ignored.
bool bypasses_proxy(const std::string& host, std::string_view no_proxy) {
  if (http_syntax::trim(no_proxy) == "*") {
    return true;
  }
  const auto name = lower(host);
  const auto address = address_bytes(host);
  while (!no_proxy.empty()) {
    const auto comma = std::min(no_proxy.find(','), no_proxy.size());
    auto entry = http_syntax::trim(no_proxy.substr(0, comma));
    no_proxy.remove_prefix(std::min(comma + 1, no_proxy.size()));
    if (entry.starts_with('[')) {
      const auto close = entry.find(']');
      entry = entry.substr(1, close == std::string_view::npos ? entry.npos : close - 1);
    } else if (const auto colon = entry.find(':');
               colon != std::string_view::npos && entry.find(':', colon + 1) == entry.npos) {
      entry = entry.substr(0, colon);  // name:port or v4:port
    }
    if (!address.empty()) {
      if (address_matches(address, entry)) {
        return true;
      }
      continue;
    }
    while (entry.starts_with('.')) {
      entry.remove_prefix(1);
    }
    const auto wanted = lower(entry);
    if (!wanted.empty() && (name == wanted || name.ends_with("." + wanted))) {
      return true;
    }
  }
  return false;
}

// ---- exchange --------------------------------------------------------------------------------

ClientResponse read_response(UpstreamConnection& connection, const HttpClientOptions& options,
                             bool response_to_head, const std::string& where, HeadHandler on_head) {
  HttpResponseParser parser(options.max_response_bytes, response_to_head);
  if (on_head) {
    parser.on_head(std::move(on_head));
  }
  // 128 KiB: a plain-HTTP image download reads in few calls (a TLS read is one record anyway).
  std::vector<char> buffer(128 * 1024);
  try {
    while (true) {
      const std::size_t got = connection.read_some(buffer.data(), buffer.size());
      if (got == 0) {
        if (parser.close_delimited() && !connection.end_is_authentic()) {
          throw HttpClientError(
              "the connection closed without TLS close_notify, so the body "
              "may be cut off");
        }
        parser.finish();
        return parser.take();
      }
      if (parser.feed({buffer.data(), got}) == HttpResponseParser::Result::complete) {
        return parser.take();
      }
    }
  } catch (const HttpClientError& e) {
    throw HttpClientError("the response from " + where + ": " + e.what());
  }
}

ClientResponse exchange(const UpstreamUrl& url, std::string wire, bool response_to_head,
                        const HttpClientOptions& options, const TlsConfig* trust,
                        const std::string& where, HeadHandler on_head) {
  if (options.proxy && !url.tls && url.unix_socket.empty()) {
    // A plain request through a proxy names its whole URL (absolute-form).
    wire.insert(wire.find(' ') + 1, "http://" + host_header(url));
  }
  UpstreamConnection connection(url, trust, options, where);
  connection.write_all(wire);
  return read_response(connection, options, response_to_head, where, std::move(on_head));
}

}  // namespace

// ---- public: URL and request -----------------------------------------------------------------

UpstreamUrl parse_upstream_url(std::string_view text) {
  if (std::any_of(text.begin(), text.end(), [](char c) { return c <= 0x20 || c >= 0x7f; })) {
    refuse_url("spaces, control characters and non-ASCII characters are not allowed");
  }
  const auto separator = text.find("://");
  const auto scheme = lower(text.substr(0, separator));
  if (separator == std::string_view::npos || (scheme != "http" && scheme != "https")) {
    refuse_url("the scheme must be http:// or https://");
  }
  const auto rest = text.substr(separator + 3);
  if (rest.find_first_of("?#") != std::string_view::npos) {
    refuse_url("a query or fragment is not allowed");
  }
  const auto path_start = std::min(rest.find('/'), rest.size());
  const auto authority = rest.substr(0, path_start);
  if (authority.find('@') != std::string_view::npos) {
    refuse_url("user info is not allowed");
  }
  UpstreamUrl url;
  url.tls = scheme == "https";
  url.port = url.tls ? 443 : 80;
  parse_authority(authority, url);
  auto path = rest.substr(path_start);
  check_path(path);
  while (path.ends_with('/')) {
    path.remove_suffix(1);
  }
  url.path = path;
  return url;
}

UpstreamUrl unix_socket_url(const std::filesystem::path& path) {
  return {.tls = false, .host = "localhost", .port = 80, .path = "", .unix_socket = path.string()};
}

std::optional<UpstreamUrl> proxy_for(const UpstreamUrl& url, const ProxySettings& proxies) {
  const auto& configured = url.tls ? proxies.https_proxy : proxies.http_proxy;
  if (configured.empty() || bypasses_proxy(url.host, proxies.no_proxy)) {
    return std::nullopt;
  }
  // As curl: a proxy written without a scheme is an HTTP proxy.
  const auto proxy =
      configured.find("://") == std::string::npos ? "http://" + configured : configured;
  auto authority = std::string_view(proxy).substr(proxy.find("://") + 3);
  authority = authority.substr(0, authority.find('/'));
  const bool has_port = authority.starts_with('[') ? authority.find("]:") != std::string_view::npos
                                                   : authority.find(':') != std::string_view::npos;
  auto parsed = parse_upstream_url(proxy);
  if (parsed.tls) {
    throw HttpClientError("proxy URL: only http:// proxies are supported");
  }
  if (!has_port) {
    parsed.port = 1080;
  }
  return parsed;
}

std::optional<std::string_view> ClientResponse::header(std::string_view lower_case_name) const {
  for (const auto& [name, value] : headers) {
    if (name == lower_case_name) {
      return value;
    }
  }
  return std::nullopt;
}

std::string serialize_client_request(const UpstreamUrl& url, const ClientRequest& request) {
  check_request_line(request);
  std::string wire = request.method + " " + request.target + " HTTP/1.1\r\n";
  wire += "Host: " + host_header(url) + "\r\n";
  for (const auto& [name, value] : request.headers) {
    check_request_header(name, value);
    wire += name + ": " + value + "\r\n";
  }
  if (!request.body.empty() || always_sends_length(request.method)) {
    wire += "Content-Length: " + std::to_string(request.body.size()) + "\r\n";
  }
  wire += "Connection: close\r\n\r\n";
  wire += request.body;
  return wire;
}

ClientResponse send_request(const UpstreamUrl& url, const ClientRequest& request,
                            const HttpClientOptions& options,
                            std::shared_ptr<const TlsConfig> trust) {
  return send_request_with_head(url, request, options, std::move(trust), nullptr);
}

ClientResponse send_request_streaming(const UpstreamUrl& url, const ClientRequest& request,
                                      const HttpClientOptions& options,
                                      std::shared_ptr<const TlsConfig> trust, BodySink sink) {
  return send_request_with_head(url, request, options, std::move(trust),
                                [sink = std::move(sink)](const ClientResponse&) { return sink; });
}

ClientResponse send_request_with_head(const UpstreamUrl& url, const ClientRequest& request,
                                      const HttpClientOptions& options,
                                      std::shared_ptr<const TlsConfig> trust, HeadHandler on_head) {
  const auto where =
      url.unix_socket.empty() ? describe_endpoint(url.host, url.port) : url.unix_socket;
  const std::string wire = serialize_client_request(url, request);
  if (url.tls && trust == nullptr) {
    throw HttpClientError("https to " + where + " needs a TLS configuration to trust");
  }
  try {
    return exchange(url, wire, request.method == "HEAD", options, trust.get(), where,
                    std::move(on_head));
  } catch (const TransportError& e) {
    throw HttpClientError(e.what());
  }
}

}  // namespace garm_edge::net
