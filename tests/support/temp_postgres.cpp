#include "support/temp_postgres.hpp"

#include <arpa/inet.h>
#include <fstream>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include "common/unique_fd.hpp"
#include "net/pki.hpp"
#include "support/run_command.hpp"

namespace garm_edge::testing {
namespace {

const std::filesystem::path kBin = "/usr/lib/postgresql/15/bin";

/// For the shell: inside single quotes, each single quote closed, escaped and reopened.
std::string quoted(const std::string& text) {
  std::string out = "'";
  for (const char c : text) {
    out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  }
  return out + "'";
}

std::string quoted(const std::filesystem::path& path) {
  return quoted(path.string());
}

/// A port nothing listens on now (the kernel's choice for port 0, released at once).
std::uint16_t free_port() {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t size = sizeof address;
  REQUIRE(::bind(fd.get(), reinterpret_cast<sockaddr*>(&address), size) == 0);
  REQUIRE(::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&address), &size) == 0);
  return ntohs(address.sin_port);
}

}  // namespace

bool TempPostgres::available() {
  return std::filesystem::exists(kBin / "initdb") && std::filesystem::exists(kBin / "pg_ctl");
}

TempPostgres::TempPostgres()
    : data_(dir_.path() / "data"), socket_dir_(dir_.path() / "socket"), pki_(dir_.path() / "pki") {
  std::filesystem::create_directories(socket_dir_);
  net::pki_init({.directory = pki_,
                 .agent_dns_names = {"localhost"},
                 .agent_ip_addresses = {"127.0.0.1"},
                 .client_name = "unused",
                 .server_file_stem = "server",
                 .server_common_name = "localhost"});
  if (::geteuid() == 0) {
    REQUIRE(run_command("chown -R nobody:nogroup " + quoted(dir_.path())).exit_code == 0);
  }
  const auto initdb = run_command(as_owner(quoted(kBin / "initdb") + " -D " + quoted(data_) +
                                           " -U postgres -E UTF8 --no-sync -A trust"));
  INFO(initdb.output);
  REQUIRE(initdb.exit_code == 0);
  std::ofstream(data_ / "pg_hba.conf", std::ios::trunc)
      << "local all all trust\n"
         "host all all 127.0.0.1/32 scram-sha-256\n";
  port_ = free_port();
  start();
}

TempPostgres::~TempPostgres() {
  run_command(as_owner(quoted(kBin / "pg_ctl") + " -D " + quoted(data_) + " -m immediate stop"));
}

std::string TempPostgres::as_owner(const std::string& command) const {
  return ::geteuid() == 0 ? "runuser -u nobody -- " + command : command;
}

void TempPostgres::start() {
  const auto options = "-c listen_addresses=127.0.0.1 -p " + std::to_string(port_) + " -k " +
                       socket_dir_.string() +
                       " -c ssl=on -c ssl_cert_file=" + (pki_ / "server.crt").string() +
                       " -c ssl_key_file=" + (pki_ / "server.key").string() + " -c fsync=off";
  const auto started =
      run_command(as_owner(quoted(kBin / "pg_ctl") + " -D " + quoted(data_) + " -l " +
                           quoted(dir_.path() / "log") + " -w -t 60 -o '" + options + "' start"));
  INFO(started.output);
  REQUIRE(started.exit_code == 0);
}

void TempPostgres::stop() {
  REQUIRE(run_command(
              as_owner(quoted(kBin / "pg_ctl") + " -D " + quoted(data_) + " -m immediate -w stop"))
              .exit_code == 0);
}

std::string TempPostgres::sql(const std::string& statement) const {
  const auto result = run_command(as_owner(
      quoted(kBin / "psql") + " -X -A -t -v ON_ERROR_STOP=1 -h " + quoted(socket_dir_) + " -p " +
      std::to_string(port_) + " -U postgres -d postgres -c " + quoted(statement)));
  INFO(statement << "\n" << result.output);
  REQUIRE(result.exit_code == 0);
  return result.output;
}

std::string TempPostgres::socket_url(const std::string& database) const {
  return "postgresql://postgres@/" + database + "?host=" + socket_dir_.string() +
         "&port=" + std::to_string(port_);
}

}  // namespace garm_edge::testing
