#include "support/api_server.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

#include "net/pki.hpp"

namespace garm_edge::testing {

ApiServer::ApiServer(std::chrono::seconds handshake_timeout)
    : ApiServer("api.xml", {}, handshake_timeout, std::chrono::seconds(2)) {}

ApiServer::ApiServer(const std::string& fixture,
                     const std::function<void(agent::AgentConfig&)>& adjust,
                     std::chrono::seconds handshake_timeout, std::chrono::seconds idle_timeout)
    : host_(fixture, [&adjust](agent::AgentConfig& config) {
        config.api.enabled = true;
        config.api.clients = {{.identity = "garm", .controllers = {kController}}};
        if (adjust) {
          adjust(config);
        }
      }) {
  pki_ = host_.state.path() / "pki";
  net::pki_init({.directory = pki_,
                 .agent_dns_names = {"localhost"},
                 .agent_ip_addresses = {"127.0.0.1"},
                 .client_name = "garm"});
  net::pki_issue_client(pki_, "stranger");
  service_ = host_.service(hypervisor_, host_.store);
  if (host_.config.guests.enabled) {
    guests_ = std::make_unique<ServedGuests>(host_.config, hypervisor_, host_.log);
    guests_->serve(*service_);
  }
  api_ = std::make_unique<agent::ControlApi>(host_.config, *service_);
  start(handshake_timeout, idle_timeout);
}

void ApiServer::start(std::chrono::seconds handshake_timeout, std::chrono::seconds idle_timeout) {
  auto options = agent::tls_server_options(host_.config.api);
  options.address = "127.0.0.1";
  options.port = 0;
  options.handshake_timeout = handshake_timeout;
  options.request_timeout = std::chrono::seconds(2);
  options.idle_timeout = idle_timeout;
  server_ = std::make_unique<net::TlsServer>(
      io_, options,
      net::TlsConfig::load(net::TlsConfig::Role::server, {.ca = pki_ / "ca.crt",
                                                          .crl = "",
                                                          .certificate = pki_ / "agent.crt",
                                                          .key = pki_ / "agent.key"}),
      [this](net::HttpRequest request, net::PeerIdentity peer, net::TlsServer::Respond respond) {
        api_->dispatch(std::move(request), std::move(peer), std::move(respond), workers_);
      });
  server_->start();
  for (auto& thread : threads_) {
    thread = std::thread([this] { io_.run(); });
  }
}

void ApiServer::stop() {
  if (stopped_) {
    return;
  }
  stopped_ = true;
  server_->stop();
  io_.stop();
  for (auto& thread : threads_) {
    thread.join();
  }
  workers_.join();
}

ApiServer::~ApiServer() {
  stop();
}

void ApiServer::reload_from(const std::filesystem::path& pki, const std::filesystem::path& crl) {
  server_->reload(
      net::TlsConfig::load(net::TlsConfig::Role::server, {.ca = pki / "ca.crt",
                                                          .crl = crl,
                                                          .certificate = pki / "agent.crt",
                                                          .key = pki / "agent.key"}));
}

std::string ApiServer::url(const std::string& path) const {
  return "https://localhost:" + std::to_string(server_->port()) + path;
}

CommandResult ApiServer::curl(const std::string& arguments, const std::string& client) const {
  return run_command("curl -sS --max-time 10 --cacert " + (pki_ / "ca.crt").string() + " --cert " +
                     (pki_ / (client + ".crt")).string() + " --key " +
                     (pki_ / (client + ".key")).string() + " " + arguments);
}

ProcessResult run_like_garm(const std::string& program,
                            const std::map<std::string, std::string>& environment,
                            const std::string& input) {
  return run_program(program, {}, environment, input);
}

ProcessResult run_program(const std::string& program, const std::vector<std::string>& arguments,
                          const std::map<std::string, std::string>& environment,
                          const std::string& input) {
  int in[2];
  int out[2];
  int err[2];
  if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) {
    return {};
  }
  std::vector<std::string> entries;
  for (const auto& [name, value] : environment) {
    entries.push_back(name + "=" + value);
  }
  std::vector<char*> envp;
  for (auto& entry : entries) {
    envp.push_back(entry.data());
  }
  envp.push_back(nullptr);
  const pid_t child = ::fork();
  if (child == 0) {
    ::dup2(in[0], 0);
    ::dup2(out[1], 1);
    ::dup2(err[1], 2);
    std::vector<char*> argv = {const_cast<char*>(program.c_str())};
    for (const auto& argument : arguments) {
      argv.push_back(const_cast<char*>(argument.c_str()));
    }
    argv.push_back(nullptr);
    ::execve(program.c_str(), argv.data(), envp.data());
    ::_exit(127);
  }
  ::close(in[0]);
  ::close(out[1]);
  ::close(err[1]);
  if (!input.empty()) {
    [[maybe_unused]] const auto written = ::write(in[1], input.data(), input.size());
  }
  ::close(in[1]);  // EOF, as garm's pipe gives
  ProcessResult result;
  pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
  int open = 2;
  while (open > 0 && ::poll(fds, 2, 30000) > 0) {
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) {
        continue;
      }
      char buffer[4096];
      const ssize_t got = ::read(fds[i].fd, buffer, sizeof buffer);
      if (got <= 0) {
        ::close(fds[i].fd);
        fds[i].fd = -1;
        --open;
      } else {
        (i == 0 ? result.out : result.err).append(buffer, static_cast<std::size_t>(got));
      }
    }
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

}  // namespace garm_edge::testing
