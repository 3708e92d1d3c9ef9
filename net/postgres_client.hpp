#pragma once

// A PostgreSQL client speaking the frontend/backend protocol 3.0 over this project's sockets and
// mbedTLS: what the hub needs of its database (statements with text parameters, transactions)
// and no more. libpq is not used because the hub is one static executable (it runs in garm's
// busybox container) and Debian's libpq cannot be linked statically: it needs GSSAPI and LDAP,
// which Debian ships as shared libraries only.

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace garm_edge::net {

/// A refusal or failure: connecting, authenticating, or a statement the server refused (then
/// `sqlstate` is the server's code, e.g. 23505 for a unique violation, and the connection is
/// still usable).
class PostgresError : public std::runtime_error {
 public:
  explicit PostgresError(const std::string& what, std::string sqlstate = "")
      : std::runtime_error(what), sqlstate_(std::move(sqlstate)) {}
  const std::string& sqlstate() const { return sqlstate_; }

 private:
  std::string sqlstate_;
};

/// Where and how to connect, from a URL as libpq takes it:
/// `postgresql://[user[:password]@][host][:port][/database][?name=value&...]`, with the
/// parameters host (a unix socket's directory when it starts with /), port, user, password,
/// dbname, sslmode (disable, require or verify-full), sslrootcert (a PEM file) and
/// connect_timeout (seconds). Percent-escapes are decoded.
struct PostgresTarget {
  enum class Tls { disable, require, verify_full };

  std::string host = "localhost";
  std::uint16_t port = 5432;
  std::string user;
  std::string password;
  std::string database;
  /// Default: verify-full over TCP, disable on a unix socket.
  Tls tls = Tls::verify_full;
  std::string root_ca_pem;  // verify-full's CAs; empty: the system's bundle
  /// Each step (connecting and authenticating, each statement) ends by then.
  std::chrono::milliseconds timeout{std::chrono::seconds(10)};

  bool unix_socket() const { return host.starts_with('/'); }
  /// "postgresql://user@host:port/database": never the password.
  std::string describe() const;
};

/// Throws PostgresError for a URL that is not one, or names a file that cannot be read.
PostgresTarget parse_postgres_url(std::string_view url);

struct PostgresResult {
  std::vector<std::string> columns;
  std::vector<std::vector<std::optional<std::string>>> rows;  // text; nothing for NULL
  std::string command;                                        // e.g. "INSERT 0 1"
  /// Rows the command touched, from its tag (0 when it names none).
  std::uint64_t affected() const;
};

/// What the server itself is told to end, in milliseconds, within the client's deadline for
/// each step (`step`), so that it ends with the server's own error: a backend blocked on a lock
/// would go on waiting after the client gave up, one more with each retry. A lock wait ends at
/// half a step, a statement at three quarters. A session idle inside a transaction ends at
/// three steps: a client that hangs or is cut off while it holds a lock (a hub's machine dying)
/// frees it for every other hub within seconds, not at TCP keepalive's two hours.
struct ServerSideTimeouts {
  std::string lock;
  std::string statement;
  std::string idle_in_transaction;
};
ServerSideTimeouts server_side_timeouts(std::chrono::milliseconds step);

class PostgresConnection {
 public:
  /// Connects, negotiates TLS as `target` asks, and authenticates (trust; SCRAM-SHA-256; MD5 or
  /// a plain password only over TLS or a unix socket). Throws PostgresError.
  explicit PostgresConnection(const PostgresTarget& target);
  ~PostgresConnection();
  PostgresConnection(const PostgresConnection&) = delete;
  PostgresConnection& operator=(const PostgresConnection&) = delete;

  /// Runs one statement with $1, $2, ... bound to `parameters` as text (nothing: NULL). Throws
  /// PostgresError: with the server's sqlstate when it refused the statement (the connection
  /// stays usable), without one when the connection failed (it is broken() from then on).
  PostgresResult query(std::string_view sql,
                       const std::vector<std::optional<std::string>>& parameters = {});
  bool broken() const;

 private:
  class Wire;
  PostgresTarget target_;  // before wire_, which refers to it
  std::unique_ptr<Wire> wire_;
};

}  // namespace garm_edge::net
