#include <algorithm>
#include <array>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <fstream>
#include <future>
#include <mutex>
#include <sstream>
#include <thread>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "net/pki.hpp"
#include "net/tls_server.hpp"
#include "support/api_server.hpp"
#include "support/run_command.hpp"
#include "support/test_support.hpp"
#include "wire/schemas.hpp"

using namespace garm_edge;
using namespace garm_edge::testing;

namespace {

const std::string kBootstrap =
    R"({"name":"garm-api01","pool_id":"0f1e2d3c-4b5a-4968-8776-a5b4c3d2e1f0","image":"debian-12","flavor":"small",)"
    R"("os_type":"linux","arch":"amd64","instance-token":"secret-token-xyz"})";

/// Whether the agent holds `count` connections within `timeout`.
bool held_within(const ApiServer& server, std::size_t count, std::chrono::seconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (server.open_connections() < count && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return server.open_connections() >= count;
}

/// A python3 process that opens `count` connections to the agent (each made by the Python
/// expression `open_one`, with `setup` run first), prints "held N", and keeps them until
/// release() (at most 120 s after the last is open).
class HeldConnections {
 public:
  HeldConnections(const ApiServer& server, std::size_t count, const std::string& setup,
                  const std::string& open_one)
      : release_((dir_.path() / "release").string()) {
    const auto script = "python3 -c \"import os, socket, ssl, time\n" + setup +
                        "connect = lambda: socket.create_connection(('127.0.0.1', " +
                        std::to_string(server.port()) + "))\nheld = [" + open_one +
                        " for _ in range(" + std::to_string(count) +
                        ")]\nprint('held', len(held), flush=True)\nopen('" + release_ +
                        ".held', 'w').close()\nend = time.time() + 120\n"
                        "while time.time() < end and not os.path.exists('" +
                        release_ + "'): time.sleep(0.02)\"";
    holder_ = std::jthread([this, script] { said_ = run_command(script).output; });
    // Each handshake takes a second or more where the agent runs under qemu-user; the test
    // checks the count itself (a REQUIRE here would leave the holder running). The agent
    // counts a connection from its accept, so its count alone would let a test go on while
    // the last ones are still in their handshakes.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(90);
    while (!std::filesystem::exists(release_ + ".held") &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    held_within(server, count, std::chrono::seconds(5));
  }
  ~HeldConnections() { release(); }
  HeldConnections(const HeldConnections&) = delete;
  HeldConnections& operator=(const HeldConnections&) = delete;

  /// Lets the connections go; returns what the process printed.
  std::string release() {
    if (holder_.joinable()) {
      std::ofstream(release_).put('\n');
      holder_.join();
    }
    return said_;
  }

 private:
  TempDir dir_;
  std::string release_;
  std::string said_;
  std::jthread holder_;
};

/// A second client, "other", acting for kOtherController (issue its certificate once the
/// server's PKI exists).
void with_other_client(agent::AgentConfig& config) {
  config.api.clients.push_back({.identity = "other", .controllers = {kOtherController}});
}

std::string controller_url(const ApiServer& server, const std::string& rest) {
  return server.url("/v1/controllers/" + kController + rest);
}

}  // namespace

TEST_CASE("the command set over mutual TLS, driven by curl", "[api][mtls]") {
  ApiServer server;
  const auto created = server.curl("-X POST --data-binary '" + kBootstrap + "' " +
                                   controller_url(server, "/instances"));
  INFO(created.output);
  REQUIRE(created.exit_code == 0);
  const auto instance = wire::parse_provider_instance(created.output);
  CHECK(instance.status == wire::InstanceStatus::running);
  CHECK(instance.name == "garm-api01");

  const auto listed = server.curl(controller_url(server, "/pools/" + kPool + "/instances"));
  CHECK(wire::parse_provider_instance_list(listed.output).size() == 1);
  CHECK_THAT(server.curl(controller_url(server, "/instances/" + instance.provider_id)).output,
             Catch::Contains("\"name\":\"garm-api01\""));
  CHECK_THAT(
      server.curl("-X POST " + controller_url(server, "/instances/garm-api01/stop?force=true"))
          .output,
      Catch::Contains("\"ok\":true"));
  CHECK_THAT(server.curl(controller_url(server, "/instances/garm-api01")).output,
             Catch::Contains("\"status\":\"stopped\""));
  CHECK_THAT(
      server.curl("-X DELETE " + controller_url(server, "/instances/" + instance.provider_id))
          .output,
      Catch::Contains("\"deleted\":true"));
  CHECK_THAT(server.curl("-X DELETE " + controller_url(server, "/instances/garm-api01")).output,
             Catch::Contains("\"deleted\":false"));
  CHECK(server.curl(controller_url(server, "/pools/" + kPool + "/instances")).output == "[]");
  const auto missing =
      server.curl("-w ' %{http_code}' " + controller_url(server, "/instances/garm-api01"));
  CHECK_THAT(missing.output, Catch::Contains("\"code\":\"not_found\"") && Catch::EndsWith(" 404"));
}

TEST_CASE("errors are JSON with a stable code and never echo the instance token", "[api][mtls]") {
  ApiServer server;
  const std::string hostile =
      R"({"name":"x'; rm -rf /","pool_id":"p","image":"i","flavor":"f","instance-token":"secret-token-xyz"})";
  TempDir dir;
  std::ofstream(dir.path() / "hostile.json") << hostile;
  const auto refused = server.curl("-w ' %{http_code}' -X POST --data-binary @" +
                                   (dir.path() / "hostile.json").string() + " " +
                                   controller_url(server, "/instances"));
  CHECK_THAT(refused.output, Catch::Contains("\"code\":\"invalid_argument\"") &&
                                 Catch::EndsWith(" 400") && !Catch::Contains("secret-token"));
  const auto garbage = server.curl("-w ' %{http_code}' -X POST --data-binary '{not json' " +
                                   controller_url(server, "/instances"));
  CHECK_THAT(garbage.output, Catch::Contains("invalid JSON") && Catch::EndsWith(" 400"));
}

TEST_CASE("a client may act only for the controllers its identity maps to", "[api][mtls]") {
  ApiServer server;
  const auto other =
      server.curl("-w ' %{http_code}' " + server.url("/v1/controllers/" + kOtherController +
                                                     "/pools/" + kPool + "/instances"));
  CHECK_THAT(other.output, Catch::Contains("\"code\":\"forbidden\"") && Catch::EndsWith(" 403"));
  const auto stranger = server.curl("-w ' %{http_code}' -X POST --data-binary '" + kBootstrap +
                                        "' " + controller_url(server, "/instances"),
                                    "clients/stranger");
  CHECK_THAT(stranger.output, Catch::EndsWith(" 403"));
  CHECK(server.curl(controller_url(server, "/pools/" + kPool + "/instances")).output ==
        "[]");  // nothing made
}

TEST_CASE("connections without an acceptable client certificate or protocol are refused",
          "[api][mtls]") {
  ApiServer server;
  const auto ca = server.pki() / "ca.crt";
  const auto healthz = server.url("/healthz");
  CHECK(run_command("curl -sS --max-time 5 --cacert " + ca.string() + " " + healthz).exit_code !=
        0);
  // The agent's own certificate is for servers only (EKU serverAuth).
  CHECK(server.curl(healthz, "agent").exit_code != 0);
  // A certificate from another CA.
  TempDir elsewhere;
  net::pki_init({.directory = elsewhere.path() / "pki",
                 .agent_dns_names = {"localhost"},
                 .agent_ip_addresses = {},
                 .client_name = "garm"});
  const auto foreign = elsewhere.path() / "pki" / "clients";
  CHECK(run_command("curl -sS --max-time 5 --cacert " + ca.string() + " --cert " +
                    (foreign / "garm.crt").string() + " --key " + (foreign / "garm.key").string() +
                    " " + healthz)
            .exit_code != 0);
  // OpenSSL 3 refuses TLS 1.1 itself at its default security level; lower it so that the
  // refusal measured is the agent's.
  const auto tls11 = run_command(
      "echo | openssl s_client -tls1_1 -cipher DEFAULT@SECLEVEL=0 -connect 127.0.0.1:" +
      std::to_string(server.port()) + " -cert " + (server.pki() / "clients/garm.crt").string() +
      " -key " + (server.pki() / "clients/garm.key").string());
  CHECK_THAT(tls11.output,
             Catch::Contains("alert protocol version") || Catch::Contains("alert number 70"));
  CHECK(run_command("curl -sS --max-time 5 http://localhost:" + std::to_string(server.port()) +
                    "/healthz")
            .exit_code != 0);
  const auto tls13 = run_command("echo | openssl s_client -tls1_3 -connect 127.0.0.1:" +
                                 std::to_string(server.port()) + " -CAfile " + ca.string());
  CHECK_THAT(tls13.output, Catch::Contains("Cipher is (NONE)"));  // no TLS 1.3: no session
  CHECK(server.curl(healthz).output == R"({"status":"ok"})");     // and the right one still works
}

TEST_CASE("a slow client does not hold up others", "[api][mtls]") {
  ApiServer server(std::chrono::seconds(30));  // the stallers outlast the whole test
  const auto before = std::chrono::steady_clock::now();
  REQUIRE(server.curl(server.url("/healthz")).output == R"({"status":"ok"})");
  const auto baseline = std::chrono::steady_clock::now() - before;  // this machine, right now
  // Three connections, opened together by one process, that send the first bytes of a TLS
  // record and then nothing.
  constexpr std::size_t kStallers = 3;
  HeldConnections stallers(server, kStallers, "",
                           "(lambda s: (s.sendall(b'\\x16\\x03\\x01'), s)[1])(connect())");
  const auto held = server.open_connections();
  const auto started = std::chrono::steady_clock::now();
  const auto answer = server.curl(server.url("/healthz"));
  const auto took = std::chrono::steady_clock::now() - started;
  const auto still_held = server.open_connections();
  const auto said = stallers.release();
  CHECK(held == kStallers);  // the server held all three ...
  CHECK(answer.output == R"({"status":"ok"})");
  CHECK(took < baseline + std::chrono::seconds(1));  // ... answered the other client at once ...
  CHECK(still_held >= kStallers);  // ... and still held them (curl's own may linger)
  CHECK(said == "held 3\n");
}

TEST_CASE("keep-alive: one connection carries many requests", "[api][mtls]") {
  ApiServer server;
  const auto url = server.url("/healthz");
  const auto result = server.curl("-w '%{num_connects}\\n' " + url + " " + url + " " + url);
  CHECK_THAT(result.output,
             Catch::Contains(R"({"status":"ok"}1)") && Catch::Contains(R"({"status":"ok"}0)"));
}

TEST_CASE("50 clients connecting at once from one address are all answered", "[api][mtls]") {
  // garm starts provider processes side by side, each with its own connection. The handshake
  // budget once evicted every connection past the 16th that had not yet sent its ClientHello.
  ApiServer server(std::chrono::seconds(30));  // 50 handshakes at once, under qemu-user too
  std::string urls;
  for (int i = 0; i < 50; ++i) {
    urls += " -o /dev/null " + server.url("/healthz");
  }
  const auto result = server.curl(
      "--parallel --parallel-immediate --parallel-max 50 -w '%{http_code} "
      "%{num_connects}\\n'" +
      urls);
  CHECK(result.exit_code == 0);
  std::istringstream lines(result.output);
  std::string line;
  int answered = 0;
  int connections = 0;
  while (std::getline(lines, line)) {
    answered += line.starts_with("200 ") ? 1 : 0;
    connections += line.ends_with(" 1") ? 1 : 0;
  }
  INFO(result.output);
  CHECK(answered == 50);
  CHECK(connections == 50);  // each its own connection and handshake, as 50 processes would
}

/// Holds the callers of `hold` until `release` (or 20 s): a libvirt that does not answer.
class LibvirtGate {
 public:
  ~LibvirtGate() { release(); }
  void hold() {
    ++waiting_;
    std::unique_lock lock(mutex_);
    wake_.wait_for(lock, std::chrono::seconds(20), [this] { return released_; });
  }
  void release() {
    const std::lock_guard lock(mutex_);
    released_ = true;
    wake_.notify_all();
  }
  int waiting() const { return waiting_; }

 private:
  std::mutex mutex_;
  std::condition_variable wake_;
  bool released_ = false;
  std::atomic<int> waiting_{0};
};

TEST_CASE("/healthz answers while every command worker waits on libvirt", "[api][mtls]") {
  LibvirtGate gate;  // outlives the server, whose workers it holds
  const std::vector<std::string> others = {"other", "third", "fourth"};
  ApiServer server("api.xml", [&others](agent::AgentConfig& config) {
    for (const auto& identity : others) {
      config.api.clients.push_back({.identity = identity, .controllers = {kController}});
    }
  });
  for (const auto& identity : others) {
    net::pki_issue_client(server.pki(), identity);
  }
  server.hypervisor().before = [&gate](const std::string& operation) {
    if (operation == "find_by_name") {
      gate.hold();
    }
  };
  std::vector<std::future<CommandResult>> stuck;
  // Released before the calls are waited for, even when a REQUIRE below fails.
  struct ReleaseOnExit {
    LibvirtGate& gate;
    ~ReleaseOnExit() { gate.release(); }
  } release_first{gate};
  constexpr int kHarnessWorkers = 4;
  // Four clients, each with a GetInstance call (a client's second call never takes the last
  // free worker, so it takes four clients to hold all four), and garm with two more.
  for (int i = 0; i < kHarnessWorkers + 2; ++i) {
    stuck.push_back(std::async(std::launch::async, [&server, &others, i] {
      const auto client = i < 3 ? "clients/" + others[static_cast<std::size_t>(i)] : "clients/garm";
      return server.curl(controller_url(server, "/instances/garm-stuck" + std::to_string(i)),
                         client);
    }));
  }
  for (int i = 0; i < 1000 && gate.waiting() < kHarnessWorkers; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  REQUIRE(gate.waiting() == kHarnessWorkers);
  const auto started = std::chrono::steady_clock::now();
  const auto health = server.curl(server.url("/healthz"));
  const auto took = std::chrono::steady_clock::now() - started;
  gate.release();
  CHECK(health.output == R"({"status":"ok"})");
  CHECK(took < std::chrono::seconds(5));  // queued behind the workers it took curl's 10 s
  for (auto& call : stuck) {
    CHECK(call.get().exit_code == 0);  // answered once libvirt did
  }
}

TEST_CASE("one controller's commands stuck on libvirt leave another controller workers",
          "[api][mtls][hostile]") {
  LibvirtGate gate;  // outlives the server, whose workers it holds
  ApiServer server("api.xml", with_other_client);
  net::pki_issue_client(server.pki(), "other");
  server.hypervisor().before = [&gate](const std::string& operation) {
    if (operation == "find_by_name") {
      gate.hold();  // garm's GetInstance calls, as graceful stops of guests ignoring ACPI would
    }
  };
  struct ReleaseOnExit {
    LibvirtGate& gate;
    ~ReleaseOnExit() { gate.release(); }
  } release_first{gate};
  std::vector<std::future<CommandResult>> stuck;
  for (int i = 0; i < 6; ++i) {  // more than the harness's 4 workers
    stuck.push_back(std::async(std::launch::async, [&server, i] {
      return server.curl(controller_url(server, "/instances/garm-stuck" + std::to_string(i)));
    }));
  }
  for (int i = 0; i < 500 && gate.waiting() < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // let any more take a worker
  CHECK(gate.waiting() == 2);                                   // garm's share of 4 workers
  const auto started = std::chrono::steady_clock::now();
  const auto other = server.curl(
      "-w ' %{http_code}' " +
          server.url("/v1/controllers/" + kOtherController + "/pools/" + kPool + "/instances"),
      "clients/other");
  const auto took = std::chrono::steady_clock::now() - started;
  gate.release();
  CHECK_THAT(other.output, Catch::EndsWith(" 200"));
  CHECK(took < std::chrono::seconds(5));  // without the share it waited for garm's calls
  for (auto& call : stuck) {
    CHECK(call.get().exit_code == 0);  // garm's calls are all answered once libvirt is
  }
}

TEST_CASE("an idle connection is closed at its deadline", "[api][mtls]") {
  ApiServer server;  // idle deadline 2 s
  const auto started = std::chrono::steady_clock::now();
  // -ign_eof: the client keeps the connection open (saying nothing) until the server closes it.
  const auto client = run_command(
      "timeout 15 openssl s_client -ign_eof -CAfile " + (server.pki() / "ca.crt").string() +
      " -connect 127.0.0.1:" + std::to_string(server.port()) + " -cert " +
      (server.pki() / "clients/garm.crt").string() + " -key " +
      (server.pki() / "clients/garm.key").string() + " < /dev/null");
  const auto waited = std::chrono::steady_clock::now() - started;
  // The session was up (a client that failed at once would pass the timing alone) ...
  CHECK_THAT(client.output, Catch::Contains("Verify return code: 0 (ok)"));
  CHECK(client.exit_code != 124);  // not killed by the 15 s timeout (openssl exits 1 on the close)
  // ... and the server hung up at its 2 s idle deadline, not before and not much after.
  CHECK(waited >= std::chrono::milliseconds(1900));
  CHECK(waited < std::chrono::seconds(8));
}

TEST_CASE("a reload switches CA and certificates without a restart", "[api][mtls]") {
  ApiServer server;
  CHECK(server.curl(server.url("/healthz")).output == R"({"status":"ok"})");
  TempDir dir;
  const auto next = dir.path() / "pki";
  net::pki_init({.directory = next,
                 .agent_dns_names = {"localhost"},
                 .agent_ip_addresses = {},
                 .client_name = "garm"});
  server.reload_from(next);
  // Clients of the old CA are refused from now on; the new CA's clients are served.
  CHECK(server.curl(server.url("/healthz")).exit_code != 0);
  const auto renewed =
      run_command("curl -sS --max-time 10 --cacert " + (next / "ca.crt").string() + " --cert " +
                  (next / "clients/garm.crt").string() + " --key " +
                  (next / "clients/garm.key").string() + " " + server.url("/healthz"));
  CHECK(renewed.output == R"({"status":"ok"})");
}

TEST_CASE("pool validation and the published schemas", "[api][mtls]") {
  ApiServer server;
  const auto validate = [&server](const std::string& body) {
    TempDir dir;
    std::ofstream(dir.path() / "pool.json") << body;
    return server.curl("-w ' %{http_code}' -X POST --data-binary @" +
                       (dir.path() / "pool.json").string() + " " +
                       controller_url(server, "/pools/validate"));
  };
  CHECK_THAT(
      validate(
          R"({"image":"debian-12","flavor":"small","arch":"amd64","extra_specs":{"enable_boot_debug":true}})")
          .output,
      Catch::Contains("\"valid\":true") && Catch::EndsWith(" 200"));
  CHECK_THAT(validate(R"({"image":"debian-12","flavor":"huge"})").output,
             Catch::Contains("unknown flavor \\\"huge\\\"") && Catch::EndsWith(" 400"));
  CHECK_THAT(validate(R"({"image":"debian-12","flavor":"small","arch":"arm64"})").output,
             Catch::Contains("is amd64 but the pool asks for arm64") && Catch::EndsWith(" 400"));
  CHECK_THAT(validate(R"({"image":"debian-12","flavor":"small","extra_specs":{"typo":1}})").output,
             Catch::Contains("extra_specs.typo") && Catch::EndsWith(" 400"));
  // What they say is held to the readers in tests/agent/base/config_schema_test.cpp.
  CHECK(server.curl(server.url("/v1/schemas/config")).output == agent::agent_config_json_schema());
  CHECK(server.curl(server.url("/v1/schemas/extra-specs")).output ==
        wire::extra_specs_json_schema());
}

TEST_CASE("invalid UTF-8 in a path is a JSON error on every route, never an end of the agent",
          "[api][mtls][hostile]") {
  ApiServer server;
  const std::vector<std::pair<std::string, std::string>> requests = {
      {"GET", "/instances/a%ffb"},        {"DELETE", "/instances/a%ffb"},
      {"POST", "/instances/a%ffb/start"}, {"POST", "/instances/a%ffb/stop"},
      {"GET", "/instances/a%ffb/guest"},  {"GET", "/pools/a%ffb/instances"},
      {"GET", "/instances/%c0%af"},       {"GET", "/instances/x%ed%a0%80"},
      {"GET", "/events?instance=a%ffb"},  {"GET", "/instances/a%01b"},
  };
  for (const auto& [method, path] : requests) {
    INFO(method << " " << path);
    const auto answer =
        server.curl("-w ' %{http_code}' -X " + method + " '" + controller_url(server, path) + "'");
    REQUIRE(answer.exit_code == 0);
    const auto body = answer.output.substr(0, answer.output.rfind(' '));
    const auto parsed = nlohmann::json::parse(body);  // valid JSON, so valid UTF-8
    CHECK(parsed.at("code") == "invalid_argument");
    CHECK_THAT(answer.output, Catch::EndsWith(" 400"));
  }
  CHECK(server.curl(server.url("/healthz")).output == R"({"status":"ok"})");
}

namespace {

/// What one curl takes on this machine right now, so a loaded machine is not mistaken for a
/// locked-out client.
std::chrono::steady_clock::duration curl_baseline(const ApiServer& server) {
  std::array<std::chrono::steady_clock::duration, 3> took{};
  for (auto& one : took) {
    const auto before = std::chrono::steady_clock::now();
    REQUIRE(server.curl(server.url("/healthz")).output == R"({"status":"ok"})");
    one = std::chrono::steady_clock::now() - before;
  }
  std::sort(took.begin(), took.end());
  return took[1];  // the median: one slow start does not set the bar
}

/// Waits (up to 60 s) until the agent holds `count` connections: the attack is in place, not
/// still in its accept backlog (which takes seconds to drain under qemu-user).
void wait_until_held(const ApiServer& server, std::size_t count) {
  REQUIRE(held_within(server, count, std::chrono::seconds(60)));
}

/// How many of `tries` requests of `client` get their answer within 1 s over `baseline`.
int answered_within_a_second(const ApiServer& server, int tries,
                             std::chrono::steady_clock::duration baseline,
                             const std::string& client = "clients/garm") {
  int answered = 0;
  for (int i = 0; i < tries; ++i) {
    const auto started = std::chrono::steady_clock::now();
    const auto answer = server.curl(server.url("/healthz"), client);
    const auto took = std::chrono::steady_clock::now() - started;
    answered += answer.output == R"({"status":"ok"})" && took < baseline + std::chrono::seconds(1);
  }
  return answered;
}

}  // namespace

TEST_CASE("1,000 silent connections from one address do not lock a client out", "[api][mtls]") {
  raise_descriptor_limit(4096);
  ApiServer server;
  const auto baseline = curl_baseline(server);
  std::vector<UniqueFd> silent;
  for (int i = 0; i < 1000; ++i) {
    silent.push_back(connect_loopback(server.port()));
    REQUIRE(silent.back().get() >= 0);
  }
  wait_until_held(server, 1000);
  CHECK(answered_within_a_second(server, 1, baseline) == 1);
  CHECK(server.evictions().handshakes == 0);  // silent ones never took a handshake slot
}

TEST_CASE("stalled ClientHellos from four addresses and 1,000 silent sockets do not lock garm out",
          "[api][mtls][hostile]") {
  raise_descriptor_limit(4096);
  ApiServer server(std::chrono::seconds(30));  // the stalled handshakes outlive the 20 requests
  const auto baseline = curl_baseline(server);
  std::vector<UniqueFd> attackers;
  for (int address = 2; address <= 5; ++address) {
    for (int i = 0; i < 16; ++i) {
      attackers.push_back(connect_loopback(server.port(), "127.0.0." + std::to_string(address)));
      REQUIRE(attackers.back().get() >= 0);
      REQUIRE(send_client_hello_and_wait(attackers.back().get()));  // taken up, then stalled
    }
  }
  for (int i = 0; i < 1000; ++i) {
    attackers.push_back(connect_loopback(server.port(), "127.0.0." + std::to_string(6 + i % 4)));
    REQUIRE(attackers.back().get() >= 0);
  }
  wait_until_held(server, 1064);
  CHECK(answered_within_a_second(server, 20, baseline) == 20);
  CHECK(server.evictions().handshakes >= 1);  // garm's handshakes took stalled ones' slots
}

TEST_CASE("200 silent sockets reopened from garm's own address do not fail its requests",
          "[api][mtls][hostile]") {
  raise_descriptor_limit(4096);
  ApiServer server;
  const auto baseline = curl_baseline(server);
  std::jthread reopener([&server](const std::stop_token& stop) {
    std::deque<UniqueFd> silent;
    while (!stop.stop_requested()) {
      silent.push_back(connect_loopback(server.port()));
      if (silent.size() > 200) {
        silent.pop_front();  // closed without a byte: costs the agent no TLS work
      }
      std::this_thread::sleep_for(std::chrono::microseconds(500));
    }
  });
  CHECK(answered_within_a_second(server, 20, baseline) == 20);
}

TEST_CASE("one client holding every connection does not lock another controller out",
          "[api][mtls][hostile]") {
  constexpr int kConnections = 16;
  // Kept-alive connections may wait 60 s: the slowest machine opens all of them in time.
  ApiServer server(
      "api.xml",
      [](agent::AgentConfig& config) {
        config.api.max_connections = kConnections;
        with_other_client(config);
      },
      std::chrono::seconds(2), std::chrono::seconds(60));
  net::pki_issue_client(server.pki(), "other");
  const auto baseline = curl_baseline(server);
  // garm's certificate opens every connection the agent allows, each kept alive after a request.
  const auto pki = server.pki().string();
  HeldConnections garm(server, kConnections,
                       "context = ssl.create_default_context(cafile='" + pki +
                           "/ca.crt')\n"
                           "context.load_cert_chain('" +
                           pki + "/clients/garm.crt', '" + pki +
                           "/clients/garm.key')\n"
                           "def keep_alive():\n"
                           "  s = context.wrap_socket(connect(), server_hostname='localhost')\n"
                           "  s.sendall(b'GET /healthz HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n')\n"
                           "  s.recv(4096)\n"
                           "  return s\n",
                       "keep_alive()");
  REQUIRE(server.open_connections() >= kConnections);
  CHECK(answered_within_a_second(server, 10, baseline, "clients/other") == 10);
  CHECK(server.evictions().established >= 1);  // garm's longest idle one made the room
  CHECK(garm.release() == "held " + std::to_string(kConnections) + "\n");
}

TEST_CASE("connections that start a request and stall hold no slot another client needs",
          "[api][mtls][hostile]") {
  constexpr int kConnections = 8;
  ApiServer server(
      "api.xml", [](agent::AgentConfig& config) { config.api.max_connections = kConnections; },
      std::chrono::seconds(2), std::chrono::seconds(60));
  const auto baseline = curl_baseline(server);
  // Any certificate of the CA (here one in no [[api.clients]] entry) takes every connection
  // and sends one byte of a request on each, which the request deadline would let it hold.
  const auto pki = server.pki().string();
  HeldConnections stalled(server, kConnections,
                          "context = ssl.create_default_context(cafile='" + pki +
                              "/ca.crt')\n"
                              "context.load_cert_chain('" +
                              pki + "/clients/stranger.crt', '" + pki +
                              "/clients/stranger.key')\n"
                              "def one_byte():\n"
                              "  s = context.wrap_socket(connect(), server_hostname='localhost')\n"
                              "  s.sendall(b'G')\n"
                              "  return s\n",
                          "one_byte()");
  REQUIRE(server.open_connections() >= kConnections);
  CHECK(answered_within_a_second(server, 5, baseline) == 5);
  CHECK(server.evictions().established >= 1);
  CHECK(stalled.release() == "held " + std::to_string(kConnections) + "\n");
}

TEST_CASE("a certificate that is not a listed client is closed right after its 403",
          "[api][mtls]") {
  ApiServer server;
  const auto url = server.url("/v1/images");
  const auto answer =
      server.curl("-w ' %{http_code} %{num_connects}\\n' " + url + " " + url, "clients/stranger");
  // Two answers, and the second needed a connection of its own.
  CHECK_THAT(answer.output, Catch::Contains(" 403 1\n") && !Catch::Contains(" 403 0\n"));
  CHECK(server.curl("-w ' %{num_connects}\\n' " + url + " " + url).output.find(" 0\n") !=
        std::string::npos);  // a listed client keeps its connection
}

TEST_CASE("[api] allow closes connections from other addresses before any TLS work",
          "[api][mtls]") {
  ApiServer server("api.xml", [](agent::AgentConfig& config) {
    config.api.allow = {net::AddressRange::parse("127.0.0.2/32")};
  });
  const auto refused = server.curl(server.url("/healthz"));
  CHECK(refused.exit_code != 0);
  CHECK(server.refused_addresses() >= 1);
  CHECK(server.curl("--interface 127.0.0.2 " + server.url("/healthz")).output ==
        R"({"status":"ok"})");
}

TEST_CASE("bad bodies from a client are 400s, never an internal error", "[api][mtls][hostile]") {
  ApiServer server("api.xml", [](agent::AgentConfig& config) {
    config.api.clients.push_back({.identity = "operator", .controllers = {"*"}});
  });
  net::pki_issue_client(server.pki(), "operator");
  TempDir dir;
  const std::vector<std::string> bodies = {
      "[]",
      "\"x\"",
      "null",
      "1",
      "{}",
      R"({"image":1})",
      R"({"name":[]})",
      R"({"image":"debian-12","flavor":"small","extra_specs":[]})",
      R"({"image":"debian-12","flavor":"small","extra_specs":{"unknown_key":1}})",
      std::string(100, '[') + std::string(100, ']'),
      "{\"name\":\"\xff\"}",
      ""};
  for (const auto* path : {"/pools/validate", "/instances", "/instances?dry_run=true"}) {
    for (const auto& body : bodies) {
      INFO(path << " " << body);
      std::ofstream(dir.path() / "body.json", std::ios::trunc) << body;
      const auto answer = server.curl("-w ' %{http_code}' -X POST --data-binary @" +
                                      (dir.path() / "body.json").string() + " '" +
                                      controller_url(server, path) + "'");
      CHECK_THAT(answer.output,
                 Catch::Contains("\"code\":\"invalid_argument\"") && Catch::EndsWith(" 400"));
    }
  }
  const auto metrics = server.curl(server.url("/metrics"), "clients/operator").output;
  CHECK_THAT(metrics,
             Catch::Contains("garm_edge_requests_total") && !Catch::Contains("code=\"internal\""));
}

TEST_CASE("a host's or the hub's certificate is no client, whatever name it carries",
          "[api][mtls][roles]") {
  ApiServer server;
  // What a join token holder gets when it enrols as "garm": the CA's signature, garm's CN, and
  // the host's role.
  const auto issue = [&](const std::string& file, const std::string& uri) {
    const auto made = net::pki_make_request("garm");
    std::filesystem::create_directories(server.pki() / "roles");
    std::ofstream(server.pki() / "roles" / (file + ".key")) << made.key_pem;
    std::ofstream(server.pki() / "roles" / (file + ".crt")) << net::pki_sign_request(
        server.pki(), made.request_pem,
        {.common_name = "garm", .uri_names = {uri}, .server_auth = true, .client_auth = true});
  };
  issue("host", "urn:garm-edge:agent:garm");
  issue("hub", "urn:garm-edge:hub:garm-edge-hub");
  const auto status_of = [&](const std::string& path, const std::string& client) {
    return server.curl("-o /dev/null -w '%{http_code}' " + server.url(path), client).output;
  };
  for (const auto* role : {"roles/host", "roles/hub"}) {
    INFO(role);
    CHECK(status_of("/v1/images", role) == "403");
    CHECK(status_of("/v1/draining", role) == "403");
    CHECK(status_of("/metrics", role) == "403");
    CHECK(status_of("/healthz", role) == "200");
  }
  CHECK_THAT(server.curl(server.url("/v1/images"), "roles/host").output,
             Catch::Contains("host \\\"garm\\\", which is no client"));
  CHECK(status_of("/v1/images", "clients/garm") == "200");
  // garm's client acts for one controller: the metrics name every controller's pools.
  CHECK(status_of("/metrics", "clients/garm") == "403");
  CHECK(status_of("/metrics", "clients/stranger") == "403");  // of the CA, but not a client
  // A metrics reader (Prometheus's certificate) reads /metrics and nothing else.
  issue("metrics", "urn:garm-edge:metrics:prometheus");
  CHECK(status_of("/metrics", "roles/metrics") == "200");
  CHECK(status_of("/v1/images", "roles/metrics") == "403");
  CHECK(status_of("/v1/capacity", "roles/metrics") == "403");
}
