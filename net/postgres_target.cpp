// A PostgreSQL connection's settings from a URL, as libpq reads it.

#include <charconv>
#include <fstream>
#include <sstream>

#include "common/hex.hpp"
#include "net/postgres_client.hpp"

namespace garm_edge::net {
namespace {

std::string percent_decoded(std::string_view text) {
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      out += text[i];
      continue;
    }
    const int high = i + 2 < text.size() ? hex_digit_value(text[i + 1]) : -1;
    const int low = i + 2 < text.size() ? hex_digit_value(text[i + 2]) : -1;
    if (high < 0 || low < 0) {
      throw PostgresError("the database URL has a malformed percent-escape");
    }
    out += static_cast<char>(high * 16 + low);
    i += 2;
  }
  return out;
}

std::uint16_t port_of(std::string_view text) {
  unsigned port = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), port);
  if (text.empty() || error != std::errc() || end != text.data() + text.size() || port == 0 ||
      port > 65535) {
    throw PostgresError("the database URL's port \"" + std::string(text) + "\" is not a port");
  }
  return static_cast<std::uint16_t>(port);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw PostgresError("sslrootcert " + path + " cannot be read");
  }
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

void apply_parameter(PostgresTarget& target, const std::string& name, const std::string& value,
                     bool& tls_given) {
  if (name == "host") {
    target.host = value;
  } else if (name == "port") {
    target.port = port_of(value);
  } else if (name == "user") {
    target.user = value;
  } else if (name == "password") {
    target.password = value;
  } else if (name == "dbname") {
    target.database = value;
  } else if (name == "sslmode") {
    tls_given = true;
    if (value == "disable") {
      target.tls = PostgresTarget::Tls::disable;
    } else if (value == "require") {
      target.tls = PostgresTarget::Tls::require;
    } else if (value == "verify-full") {
      target.tls = PostgresTarget::Tls::verify_full;
    } else {
      throw PostgresError("sslmode \"" + value + "\" is not disable, require or verify-full");
    }
  } else if (name == "sslrootcert") {
    target.root_ca_pem = read_file(value);
  } else if (name == "connect_timeout") {
    int seconds = 0;
    const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), seconds);
    if (error != std::errc() || end != value.data() + value.size() || seconds < 1 ||
        seconds > 3600) {
      throw PostgresError("connect_timeout \"" + value + "\" is not 1 to 3600 seconds");
    }
    target.timeout = std::chrono::seconds(seconds);
  } else if (name != "application_name") {
    throw PostgresError("the database URL's parameter \"" + name + "\" is not one garm-edge reads");
  }
}

}  // namespace

std::string PostgresTarget::describe() const {
  const bool ipv6 = host.find(':') != std::string::npos;
  return "postgresql://" + (user.empty() ? "" : user + "@") +
         (unix_socket() ? "[" + host + "]"
          : ipv6        ? "[" + host + "]"
                        : host) +
         ":" + std::to_string(port) + "/" + database;
}

PostgresTarget parse_postgres_url(std::string_view url) {
  PostgresTarget target;
  std::string_view rest;
  for (const std::string_view scheme : {"postgresql://", "postgres://"}) {
    if (url.starts_with(scheme)) {
      rest = url.substr(scheme.size());
    }
  }
  if (rest.data() == nullptr) {
    throw PostgresError("the database URL must start with postgresql://");
  }
  const auto query_at = rest.find('?');
  const auto query = query_at == std::string_view::npos ? "" : rest.substr(query_at + 1);
  rest = rest.substr(0, query_at);
  const auto slash = rest.find('/');
  if (slash != std::string_view::npos) {
    target.database = percent_decoded(rest.substr(slash + 1));
    rest = rest.substr(0, slash);
  }
  if (const auto at = rest.rfind('@'); at != std::string_view::npos) {
    const auto credentials = rest.substr(0, at);
    const auto colon = credentials.find(':');
    target.user = percent_decoded(credentials.substr(0, colon));
    if (colon != std::string_view::npos) {
      target.password = percent_decoded(credentials.substr(colon + 1));
    }
    rest = rest.substr(at + 1);
  }
  if (rest.starts_with('[')) {  // [IPv6]:port
    const auto close = rest.find(']');
    if (close == std::string_view::npos) {
      throw PostgresError("the database URL's host has an unclosed [");
    }
    target.host = std::string(rest.substr(1, close - 1));
    rest = rest.substr(close + 1);
    if (rest.starts_with(':')) {
      target.port = port_of(rest.substr(1));
    }
  } else if (!rest.empty()) {
    const auto colon = rest.find(':');
    target.host = percent_decoded(rest.substr(0, colon));
    if (colon != std::string_view::npos) {
      target.port = port_of(rest.substr(colon + 1));
    }
  }
  bool tls_given = false;
  std::string_view parameters = query;
  while (!parameters.empty()) {
    const auto amp = parameters.find('&');
    const auto pair = parameters.substr(0, amp);
    const auto equals = pair.find('=');
    if (equals == std::string_view::npos) {
      throw PostgresError("the database URL's parameter \"" + std::string(pair) +
                          "\" has no value");
    }
    apply_parameter(target, percent_decoded(pair.substr(0, equals)),
                    percent_decoded(pair.substr(equals + 1)), tls_given);
    parameters = amp == std::string_view::npos ? "" : parameters.substr(amp + 1);
  }
  if (target.host.empty()) {
    target.host = "localhost";
  }
  if (!tls_given && target.unix_socket()) {
    target.tls = PostgresTarget::Tls::disable;
  }
  if (target.user.empty()) {
    throw PostgresError("the database URL names no user");
  }
  if (target.database.empty()) {
    target.database = target.user;
  }
  return target;
}

}  // namespace garm_edge::net
