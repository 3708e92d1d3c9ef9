// `garm-edge-agent serve` as systemd runs it with Type=notify and WatchdogSec=: the test plays
// systemd's notification socket and checks what the agent tells it, and when.

#include <csignal>
#include <cstring>
#include <fstream>
#include <poll.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include "common/temp_dir.hpp"
#include "common/unique_fd.hpp"
#include "support/run_command.hpp"

using namespace garm_edge;

namespace {

/// The datagram socket systemd listens on; returns each message as it arrives.
class NotifySocket {
 public:
  explicit NotifySocket(const std::filesystem::path& path)
      : path_(path), socket_(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0)) {
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::strncpy(address.sun_path, path.c_str(), sizeof address.sun_path - 1);
    REQUIRE(::bind(socket_.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address) ==
            0);
  }

  /// The next message, or "" after `timeout`.
  std::string next(std::chrono::milliseconds timeout) {
    pollfd waiting{.fd = socket_.get(), .events = POLLIN, .revents = 0};
    if (::poll(&waiting, 1, static_cast<int>(timeout.count())) <= 0) {
      return "";
    }
    char buffer[4096];
    const auto got = ::recv(socket_.get(), buffer, sizeof buffer, 0);
    return got > 0 ? std::string(buffer, static_cast<std::size_t>(got)) : "";
  }

  /// Skips messages until one contains `wanted`; false after `timeout`.
  bool wait_for(const std::string& wanted, std::chrono::milliseconds timeout) {
    const auto give_up = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < give_up) {
      if (next(std::chrono::milliseconds(200)).find(wanted) != std::string::npos) {
        return true;
      }
    }
    return false;
  }

 private:
  std::filesystem::path path_;
  UniqueFd socket_;
};

}  // namespace

TEST_CASE("serve tells systemd it is ready, feeds the watchdog, and reports reload and stop",
          "[systemd][integration]") {
  TempDir dir("notify");
  const auto pki = dir.path() / "pki";
  const std::string agent = GARM_EDGE_AGENT_BIN;
  REQUIRE(testing::run_command(agent + " pki init --dir " + pki.string()).exit_code == 0);
  std::ofstream(dir.path() / "agent.toml") << R"([agent]
state_dir = ")" << (dir.path() / "state").string()
                                           << R"("
[libvirt]
uri = "test:///default"
storage_pool = "default-pool"
[api]
address = "127.0.0.1"
port = 0
ca = ")" << (pki / "ca.crt").string() << R"("
certificate = ")" << (pki / "agent.crt").string()
                                           << R"("
key = ")" << (pki / "agent.key").string() << R"("
[[api.clients]]
identity = "garm"
controllers = ["*"]
[[images]]
name = "debian-12"
base_path = "/var/lib/garm-edge/images/debian-12.qcow2"
[[flavors]]
name = "small"
)";
  NotifySocket systemd(dir.path() / "notify.sock");
  const std::string notify_env = "NOTIFY_SOCKET=" + (dir.path() / "notify.sock").string();
  const std::string config = (dir.path() / "agent.toml").string();
  std::vector<char*> argv{const_cast<char*>(agent.c_str()), const_cast<char*>("serve"),
                          const_cast<char*>("--config"), const_cast<char*>(config.c_str()),
                          nullptr};
  std::vector<char*> envp{const_cast<char*>(notify_env.c_str()),
                          const_cast<char*>("WATCHDOG_USEC=400000"), nullptr};
  pid_t pid = -1;
  REQUIRE(::posix_spawn(&pid, agent.c_str(), nullptr, nullptr, argv.data(), envp.data()) == 0);

  const auto ready = systemd.next(std::chrono::seconds(10));
  CHECK(ready.find("READY=1") != std::string::npos);
  CHECK(ready.find("STATUS=serving: control API on 127.0.0.1:") != std::string::npos);
  // WatchdogSec=0.4s: a ping at least every 0.2 s.
  CHECK(systemd.next(std::chrono::milliseconds(600)) == "WATCHDOG=1");
  CHECK(systemd.next(std::chrono::milliseconds(600)) == "WATCHDOG=1");

  ::kill(pid, SIGHUP);
  CHECK(systemd.wait_for("RELOADING=1\nMONOTONIC_USEC=", std::chrono::seconds(5)));
  CHECK(systemd.wait_for("READY=1", std::chrono::seconds(5)));

  ::kill(pid, SIGTERM);
  CHECK(systemd.wait_for("STOPPING=1", std::chrono::seconds(5)));
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}
