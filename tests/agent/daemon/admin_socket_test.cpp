// The operator's commands reach the running agent through its admin socket, as virsh reaches
// libvirtd: the real `garm-edge-agent serve`, the real CLI, a real HTTPS image source.

#include <csignal>
#include <fstream>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

#include <catch2/catch.hpp>

#include "common/durable_file.hpp"
#include "common/temp_dir.hpp"
#include "net/admin_client.hpp"
#include "net/admin_server.hpp"
#include "net/unix_socket.hpp"
#include "support/fake_garm.hpp"
#include "support/quiet_logger.hpp"
#include "support/run_command.hpp"

using garm_edge::testing::QuietLogger;
using namespace garm_edge;
using namespace garm_edge::agent;
using garm_edge::testing::run_command;

namespace {

net::AdminRequest images(const std::string& action, const std::string& image = "") {
  return {.command = "images", .action = action, .name = image};
}

/// What a raw client gets for sending `bytes` on the socket at `path`.
std::string raw_exchange(const std::filesystem::path& path, const std::string& bytes) {
  const auto socket = net::connect_unix(path);
  REQUIRE(socket.get() >= 0);
  net::set_io_timeout(socket.get(), std::chrono::seconds(10));
  ::send(socket.get(), bytes.data(), bytes.size(), MSG_NOSIGNAL);
  std::string answer;
  char buffer[4096];
  for (ssize_t got = 0; (got = ::recv(socket.get(), buffer, sizeof buffer, 0)) > 0;) {
    answer.append(buffer, static_cast<std::size_t>(got));
  }
  return answer;
}

}  // namespace

TEST_CASE("the admin socket answers its owner's commands, with progress, and refuses garbage",
          "[admin][integration]") {
  TempDir dir("admin");
  QuietLogger log;
  std::vector<std::string> asked;
  net::AdminServer server(
      net::admin_socket_path(dir.path()),
      [&](const net::AdminRequest& request, const net::AdminServer::Progress& progress) {
        asked.push_back(request.command + " " + request.action + " " + request.name);
        progress(1, 4);
        progress(4, 4);
        return net::AdminResult{.exit_code = request.name == "bad" ? 1 : 0,
                                .output = "done " + request.name + "\n",
                                .error = request.name == "bad" ? "it failed" : ""};
      },
      log);
  server.start();

  struct stat socket_file {};
  REQUIRE(::stat(net::admin_socket_path(dir.path()).c_str(), &socket_file) == 0);
  CHECK((socket_file.st_mode & 0777) == 0600);  // no other account reaches it

  std::vector<std::pair<std::uint64_t, std::uint64_t>> seen;
  const auto answer = net::ask_running_daemon(
      dir.path(), images("pull", "debian-12"),
      [&](std::uint64_t bytes, std::uint64_t total) { seen.emplace_back(bytes, total); });
  REQUIRE(answer);
  CHECK(answer->exit_code == 0);
  CHECK(answer->output == "done debian-12\n");
  CHECK(seen == std::vector<std::pair<std::uint64_t, std::uint64_t>>{{1, 4}, {4, 4}});
  CHECK(net::ask_running_daemon(dir.path(), images("pull", "bad"), {})->error == "it failed");

  SECTION("a line that is no request, or never ends, is answered with an error") {
    CHECK_THAT(raw_exchange(net::admin_socket_path(dir.path()), "[1,2]\n"),
               Catch::Contains("not a JSON object"));
    CHECK_THAT(raw_exchange(net::admin_socket_path(dir.path()), std::string(64 * 1024, 'x')),
               Catch::Contains("longer than 4096 bytes"));
    CHECK_THAT(raw_exchange(net::admin_socket_path(dir.path()), "{\"command\": 7}\n"),
               Catch::Contains("is not a string"));
    CHECK(asked.size() == 2);  // none of them reached a command
  }
  SECTION("once it stops, the CLI finds no agent and works alone") {
    server.stop_accepting();
    CHECK_FALSE(std::filesystem::exists(net::admin_socket_path(dir.path())));
    CHECK_FALSE(net::ask_running_daemon(dir.path(), images("list"), {}));
  }
}

TEST_CASE("a socket left by an agent that died is no agent, and a long state path still serves",
          "[admin][integration]") {
  TempDir dir("admin-stale");
  {
    const auto left =
        net::listen_unix(net::admin_socket_path(dir.path()));  // closed without unlinking
  }
  CHECK(std::filesystem::exists(net::admin_socket_path(dir.path())));
  CHECK_FALSE(net::ask_running_daemon(dir.path(), images("list"), {}));

  // Deeper than sun_path's 108 bytes: reached through the directory's descriptor.
  auto deep = dir.path();
  for (int i = 0; i < 6; ++i) {
    deep /= std::string(24, static_cast<char>('a' + i));
  }
  std::filesystem::create_directories(deep);
  QuietLogger log;
  net::AdminServer server(
      net::admin_socket_path(deep),
      [](const net::AdminRequest&, const net::AdminServer::Progress&) {
        return net::AdminResult{.exit_code = 0, .output = "deep\n", .error = ""};
      },
      log);
  server.start();
  REQUIRE(net::admin_socket_path(deep).string().size() > 108);
  const auto answer = net::ask_running_daemon(deep, images("list"), {});
  REQUIRE(answer);
  CHECK(answer->output == "deep\n");
}

namespace {

/// `garm-edge-agent serve` with one image pulled from a local HTTPS source, until destroyed.
struct ServingAgent {
  TempDir dir{"admin-agent"};
  TempDir served{"admin-images"};
  std::unique_ptr<testing::FakeGarm> source;
  std::string agent = GARM_EDGE_AGENT_BIN;
  std::string config = (dir.path() / "agent.toml").string();
  std::filesystem::path log = dir.path() / "agent.log";
  pid_t pid = -1;

  ServingAgent() {
    REQUIRE(run_command("head -c 4194304 /dev/urandom > '" + (served.path() / "disk.raw").string() +
                        "'")
                .exit_code == 0);
    const auto sha256 = run_command("sha256sum '" + (served.path() / "disk.raw").string() + "'")
                            .output.substr(0, 64);
    source =
        std::make_unique<testing::FakeGarm>(testing::FakeGarmOptions{.downloads = served.path()});
    std::ofstream(config) << "[agent]\nstate_dir = \"" << (dir.path() / "state").string()
                          << "\"\n[libvirt]\nuri = \"test:///default\"\n"
                             "storage_pool = \"default-pool\"\n[pull]\nca_bundle = \""
                          << source->pki().ca_certificate.string() << "\"\ndirectory = \""
                          << (dir.path() / "bases").string()
                          << "\"\n[[images]]\nname = \"debian-12\"\nsource = \""
                          << source->base_url() << "/downloads/disk.raw\"\nsha256 = \"" << sha256
                          << "\"\n[[flavors]]\nname = \"small\"\n";
  }
  ~ServingAgent() { stop(); }

  void start() {
    const auto ready = dir.path() / "ready";
    const std::string command = "exec " + agent + " serve --config " + config + " --ready-file " +
                                ready.string() + " 2>" + log.string();
    std::vector<char*> argv{const_cast<char*>("/bin/sh"), const_cast<char*>("-c"),
                            const_cast<char*>(command.c_str()), nullptr};
    REQUIRE(::posix_spawn(&pid, "/bin/sh", nullptr, nullptr, argv.data(), environ) == 0);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!std::filesystem::exists(ready) && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    REQUIRE(std::filesystem::exists(ready));
  }
  void stop() {
    if (pid > 0) {
      ::kill(pid, SIGTERM);
      int status = 0;
      ::waitpid(pid, &status, 0);
      pid = -1;
    }
  }
  testing::CommandResult cli(const std::string& arguments) const {
    return run_command(agent + " " + arguments + " --config " + config);
  }
  std::string agent_log() const { return read_file(log).value_or(""); }
};

}  // namespace

TEST_CASE("images and reconcile go through the running agent, and work alone when none runs",
          "[admin][images][integration]") {
  ServingAgent host;
  host.start();

  const auto pulled = host.cli("images pull debian-12");
  INFO(pulled.output << host.agent_log());
  REQUIRE(pulled.exit_code == 0);
  CHECK_THAT(pulled.output, Catch::Contains("is ready at"));
  const auto listed = host.cli("images list");
  CHECK(listed.exit_code == 0);
  CHECK_THAT(listed.output, Catch::Matches("(.|\n)*debian-12 +ready +sha256:(.|\n)*"));

  // It failed before: "state directory … is in use by another garm-edge-agent process".
  const auto removed = host.cli("images remove debian-12");
  INFO(removed.output);
  CHECK(removed.exit_code == 0);
  CHECK_THAT(removed.output, Catch::Contains("removed "));
  const auto reconciled = host.cli("reconcile");
  CHECK(reconciled.exit_code == 0);
  CHECK_THAT(host.agent_log(), Catch::Contains("admin socket: images remove debian-12") &&
                                   Catch::Contains("admin socket: reconcile"));
  CHECK(host.cli("images pull ubuntu").exit_code == 2);  // no such image: a usage error

  host.stop();
  CHECK_FALSE(std::filesystem::exists(host.dir.path() / "state" / "admin.sock"));
  const auto alone = host.cli("images list");
  CHECK(alone.exit_code == 0);
  CHECK_THAT(alone.output, Catch::Contains("debian-12"));
}

TEST_CASE("on a host where the agent never ran, images list and pull work, and a failure is listed",
          "[admin][images][integration]") {
  ServingAgent host;  // never started: no state directory
  const auto listed = host.cli("images list");
  INFO(listed.output);
  CHECK(listed.exit_code == 0);
  CHECK_THAT(listed.output, Catch::Matches("(.|\n)*debian-12 +not pulled(.|\n)*"));
  CHECK_FALSE(std::filesystem::exists(host.dir.path() / "state"));  // a look makes nothing

  std::filesystem::remove(host.served.path() / "disk.raw");  // the source answers 404
  const auto failed = host.cli("images pull debian-12");
  CHECK(failed.exit_code == 1);
  CHECK_THAT(failed.output, Catch::Contains("HTTP 404"));
  const auto after = host.cli("images list");
  INFO(after.output);
  CHECK_THAT(after.output, Catch::Matches("(.|\n)*debian-12 +failed(.|\n)*") &&
                               Catch::Contains("debian-12: HTTP 404"));
}
