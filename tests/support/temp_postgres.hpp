#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "common/temp_dir.hpp"

namespace garm_edge::testing {

/// A PostgreSQL cluster of Debian's binaries (postgresql-15) in a temporary directory, no system
/// service: on a unix socket in that directory (trust) and on 127.0.0.1 (SCRAM-SHA-256; TLS
/// with a certificate for 127.0.0.1 and localhost from its own CA, ca_pem()). Run as `nobody`
/// when the test runs as root, which PostgreSQL refuses. Stopped and removed with the object.
class TempPostgres {
 public:
  TempPostgres();
  ~TempPostgres();
  TempPostgres(const TempPostgres&) = delete;
  TempPostgres& operator=(const TempPostgres&) = delete;

  /// Whether Debian's PostgreSQL 15 server binaries are installed.
  static bool available();

  /// Runs `sql` as the superuser; REQUIREs it succeeds. Returns psql's unaligned output.
  std::string sql(const std::string& sql) const;
  /// `pg_ctl stop -m immediate`, then start again on the same port and socket.
  void stop();
  void start();

  const std::filesystem::path& socket_dir() const { return socket_dir_; }
  std::uint16_t port() const { return port_; }
  std::filesystem::path ca_file() const { return pki_ / "ca.crt"; }
  /// postgresql:// on the unix socket as the superuser (trust).
  std::string socket_url(const std::string& database = "postgres") const;

 private:
  std::string as_owner(const std::string& command) const;

  TempDir dir_{"postgres"};
  std::filesystem::path data_;
  std::filesystem::path socket_dir_;
  std::filesystem::path pki_;
  std::uint16_t port_ = 0;
};

}  // namespace garm_edge::testing
