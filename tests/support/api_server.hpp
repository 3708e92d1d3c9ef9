#pragma once

#include <array>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <asio.hpp>

#include "agent/api/control_api.hpp"
#include "net/tls_server.hpp"
#include "support/run_command.hpp"
#include "support/test_support.hpp"

namespace garm_edge::testing {

/// An agent's control API on a loopback port, with certificates from pki_init, served in this
/// process on the libvirt test driver; clients are real processes (curl, openssl, the provider).
class ApiServer {
 public:
  /// `handshake_timeout`: how long a connection may take to complete its TLS handshake.
  explicit ApiServer(std::chrono::seconds handshake_timeout = std::chrono::seconds(2));
  /// An agent on its own copy of `fixture`, its config changed by `adjust` (after the API
  /// section is set up).
  /// `idle_timeout`: how long a kept-alive connection may wait for its next request.
  ApiServer(const std::string& fixture, const std::function<void(agent::AgentConfig&)>& adjust,
            std::chrono::seconds handshake_timeout = std::chrono::seconds(2),
            std::chrono::seconds idle_timeout = std::chrono::seconds(2));
  ~ApiServer();
  ApiServer(const ApiServer&) = delete;
  ApiServer& operator=(const ApiServer&) = delete;

  std::string url(const std::string& path) const;
  /// curl with garm's client certificate (or another one from the PKI directory).
  CommandResult curl(const std::string& arguments,
                     const std::string& client = "clients/garm") const;

  const std::filesystem::path& pki() const { return pki_; }
  /// As SIGHUP does: the server's certificates and CA from a PKI directory, and a CRL.
  void reload_from(const std::filesystem::path& pki, const std::filesystem::path& crl = "");
  std::uint16_t port() const { return server_->port(); }
  net::TlsServerEvictions evictions() const { return server_->evictions(); }
  std::uint64_t refused_addresses() const { return server_->refused_addresses(); }
  std::size_t open_connections() const { return server_->open_connections(); }
  Host& host() { return host_; }
  /// The agent's hypervisor, for hooks on its operations (e.g. to hold a create at a step).
  FaultyHypervisor& hypervisor() { return hypervisor_; }
  agent::InstanceService& service() { return *service_; }
  /// As if the agent process died: its port closes, nothing answers any more.
  void stop();

 private:
  void start(std::chrono::seconds handshake_timeout, std::chrono::seconds idle_timeout);

  Host host_;
  CrashSwitch crash_;
  FaultyHypervisor hypervisor_{host_.hypervisor, crash_};
  std::filesystem::path pki_;
  std::unique_ptr<ServedGuests> guests_;  // with a [guests] section only
  std::unique_ptr<agent::InstanceService> service_;
  std::unique_ptr<agent::ControlApi> api_;
  asio::io_context io_;
  agent::FairWorkQueue workers_{4};  // two per client
  std::unique_ptr<net::TlsServer> server_;
  std::array<std::thread, 2> threads_;
  bool stopped_ = false;
};

struct ProcessResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

/// Runs `program` as garm does: no arguments, exactly `environment` (no PATH, no HOME), `input`
/// on a stdin pipe, stdout and stderr captured separately.
ProcessResult run_like_garm(const std::string& program,
                            const std::map<std::string, std::string>& environment,
                            const std::string& input = "");

/// The same with command-line `arguments` (after the program's name), as a person runs it.
ProcessResult run_program(const std::string& program, const std::vector<std::string>& arguments,
                          const std::map<std::string, std::string>& environment = {},
                          const std::string& input = "");

}  // namespace garm_edge::testing
