// The guest-facing service end to end on loopback: a real HTTP server, cloud-init's own seed
// reader and curl as guests (each bound to its reserved 127.0.0.x address), and a fake garm
// over HTTPS behind the relay.

#include "agent/guests/guest_service.hpp"

#include <fstream>
#include <future>
#include <poll.h>
#include <set>
#include <sstream>
#include <sys/stat.h>
#include <thread>
#include <tuple>

#include <asio.hpp>
#include <catch2/catch.hpp>

#include "agent/guests/garm_relay.hpp"
#include "agent/guests/guest_access.hpp"
#include "agent/guests/guest_attachments.hpp"
#include "agent/guests/guest_dispatcher.hpp"
#include "agent/guests/guest_index.hpp"
#include "agent/instances/identifiers.hpp"
#include "agent/instances/warm_pool.hpp"
#include "net/http_server.hpp"
#include "net/secret_token.hpp"
#include "support/fake_garm.hpp"
#include "support/guest_host.hpp"
#include "support/run_command.hpp"
#include "support/test_support.hpp"
#include "wire/base64.hpp"

using namespace garm_edge;
using namespace garm_edge::testing;

namespace {

const std::string kTokenA = "eyJhbGciOiJIUzI1NiJ9.guest-a.signature";
const std::string kTokenB = "eyJhbGciOiJIUzI1NiJ9.guest-b.signature";

struct SeedRead {
  bool ok = false;
  nlohmann::json documents;
  std::string output;
};

/// cloud-init 22.4's NoCloud reader (read_seeded), from `source`.
SeedRead read_seed(const std::string& seed_url, const std::string& source) {
  const auto result =
      run_command(std::string("/usr/bin/python3 ") + GARM_EDGE_TEST_DATA_DIR +
                  "/../support/read_seed_like_cloud_init.py '" + seed_url + "' " + source);
  SeedRead read{.ok = result.exit_code == 0, .documents = {}, .output = result.output};
  if (read.ok) {
    read.documents = nlohmann::json::parse(result.output);
  }
  return read;
}

std::string bearer(const std::string& token) {
  return "-H 'Authorization: Bearer " + token + "'";
}

/// curl arguments for a status report (plain words: nothing here needs JSON escaping).
std::string status_report(const std::string& token, const std::string& status,
                          const std::string& message) {
  return bearer(token) + " -H 'Content-Type: application/json' --data '{\"status\":\"" + status +
         "\",\"message\":\"" + message + "\"}'";
}

FakeGarmOptions two_instances() {
  FakeGarmOptions options;
  options.instances = {
      {kTokenA,
       {{"install_script",
         "#!/bin/bash\nCALLBACK_URL=@GARM_URL@/api/v1/callbacks\n"
         "METADATA_URL=@GARM_URL@/api/v1/metadata/\n# install A\n"},
        {"registration_token", "REG-A"},
        {"jit",
         {{"runner", wire::base64_encode(std::string("\x00\x01\xff{\"agentId\":7}", 16))}}}}},
      {kTokenB,
       {{"install_script", "#!/bin/bash\n# install B\n"}, {"registration_token", "REG-B"}}},
  };
  return options;
}

}  // namespace

TEST_CASE("a guest reads its own seed with cloud-init's reader, and only its own",
          "[guests][integration]") {
  FakeGarm garm(two_instances());
  GuestHost agent(garm);
  const auto a = agent.service->create(kControllerId, agent.bootstrap("garm-guest-a", kTokenA));
  const auto b = agent.service->create(kControllerId, agent.bootstrap("garm-guest-b", kTokenB));
  REQUIRE(a.addresses.size() == 1);
  CHECK(a.addresses.at(0).address == "127.0.0.2");
  CHECK(b.addresses.at(0).address == "127.0.0.3");
  const auto seed_a = agent.seed_url("garm-guest-a");
  CHECK(seed_a.rfind(agent.base_url() + "/", 0) == 0);
  CHECK(seed_a.back() == '/');

  // The reservation is in the network, for the MAC in the domain.
  const auto network = agent.host.hypervisor.network("edge-net");
  REQUIRE(network.hosts.size() == 2);
  CHECK(network.hosts.at(0).ip == "127.0.0.2");

  const auto read = read_seed(seed_a, "127.0.0.2");
  REQUIRE(read.ok);
  CHECK(read.documents["meta_data"]["instance-id"] == a.provider_id);
  CHECK(read.documents["meta_data"]["local-hostname"] == "garm-guest-a");
  const std::string user_data = read.documents["user_data"];
  CHECK(user_data.rfind("#cloud-config\n", 0) == 0);
  CHECK(read.documents["vendor_data"].is_string());
  // In relay mode the wrapper inside names the agent, not garm.
  auto relayed = agent.bootstrap("garm-guest-a", kTokenA);
  relayed.callback_url = agent.base_url() + "/api/v1/callbacks";
  relayed.metadata_url = agent.base_url() + "/api/v1/metadata";
  CHECK(user_data.find(wire::base64_encode(wrapper_for(relayed))) != std::string::npos);

  SECTION("another guest's address, or a forged X-Forwarded-For, gets nothing") {
    CHECK_FALSE(read_seed(seed_a, "127.0.0.3").ok);
    const auto forged = curl_from("127.0.0.3", seed_a + "user-data",
                                  "-H 'X-Forwarded-For: 127.0.0.2' -H 'Forwarded: for=127.0.0.2'");
    CHECK(forged.status == 404);
    CHECK(forged.body == "404 page not found\n");
  }
  SECTION("a wrong or truncated token gets the same 404") {
    auto wrong = seed_a;
    wrong[wrong.size() - 2] = wrong[wrong.size() - 2] == 'A' ? 'B' : 'A';
    CHECK(curl_from("127.0.0.2", wrong + "meta-data", "").status == 404);
    CHECK(curl_from("127.0.0.2", agent.base_url() + "/meta-data", "").status == 404);
  }
  SECTION("after delete, the seed and the reservation are gone") {
    CHECK(agent.service->remove(kControllerId, instance_ref("garm-guest-a")));
    CHECK_FALSE(read_seed(seed_a, "127.0.0.2").ok);
    const auto after = agent.host.hypervisor.network("edge-net");
    REQUIRE(after.hosts.size() == 1);
    CHECK(after.hosts.at(0).ip == "127.0.0.3");
  }
  SECTION("tokens never reach the log") {
    for (const auto& line : agent.host.log.lines()) {
      CHECK(line.find(kTokenA) == std::string::npos);
      CHECK(line.find(seed_a.substr(seed_a.size() - 20)) == std::string::npos);
    }
  }
}

TEST_CASE("the relay passes a guest's garm calls through and closes access after idle",
          "[guests][integration]") {
  FakeGarm garm(two_instances());
  GuestHost agent(garm);
  agent.service->create(kControllerId, agent.bootstrap("garm-guest-a", kTokenA));
  agent.service->create(kControllerId, agent.bootstrap("garm-guest-b", kTokenB));
  const auto callbacks = agent.base_url() + "/api/v1/callbacks";
  const auto metadata = agent.base_url() + "/api/v1/metadata";
  const auto json_body = std::string("-H 'Content-Type: application/json' ");
  REQUIRE(read_seed(agent.seed_url("garm-guest-a"), "127.0.0.2").ok);

  const auto installing =
      curl_from("127.0.0.2", callbacks + "/status",
                bearer(kTokenA) + " " + json_body +
                    "--data '{\"status\":\"installing\",\"message\":\"downloading\"}'");
  CHECK(installing.status == 200);

  const auto script = curl_from("127.0.0.2", metadata + "/install-script/", bearer(kTokenA));
  REQUIRE(script.status == 200);
  CHECK(script.body.size() > 8 * 1024);  // the fake garm sends it chunked
  CHECK(script.body.find("# install A") != std::string::npos);
  // garm's URLs inside the script now name the agent, both slash forms.
  CHECK(script.body.find("CALLBACK_URL=" + callbacks + "\n") != std::string::npos);
  CHECK(script.body.find("METADATA_URL=" + metadata + "/\n") != std::string::npos);
  CHECK(script.body.find(garm.base_url()) == std::string::npos);

  const auto runner_file =
      curl_from("127.0.0.2", metadata + "/credentials/runner", bearer(kTokenA));
  CHECK(runner_file.status == 200);
  CHECK(runner_file.body == std::string("\x00\x01\xff{\"agentId\":7}", 16));  // binary-safe
  CHECK_THAT(runner_file.headers, Catch::Contains("filename=.runner"));

  SECTION("a guest cannot act as another: B's address with A's token, or no token") {
    CHECK(curl_from("127.0.0.3", metadata + "/credentials/runner", bearer(kTokenA)).status == 404);
    CHECK(curl_from("127.0.0.2", metadata + "/credentials/runner", "").status == 404);
    CHECK(
        curl_from("127.0.0.2", metadata + "/runner-registration-token/", bearer(kTokenB)).status ==
        404);
  }
  SECTION("garm's own refusals come back as they are") {
    // A is a JIT instance: garm answers 401 to a registration-token request.
    const auto refused =
        curl_from("127.0.0.2", metadata + "/runner-registration-token/", bearer(kTokenA));
    CHECK(refused.status == 401);
    CHECK(refused.body == R"({"error":"Not Authorized","details":""})");
  }
  SECTION("reports are recorded; after idle the relay and the seed close") {
    CHECK(
        curl_from(
            "127.0.0.2", callbacks + "/system-info/",
            bearer(kTokenA) + " " + json_body +
                "--data '{\"os_name\":\"Debian GNU/Linux\",\"os_version\":\"12\",\"agent_id\":7}'")
            .status == 200);
    CHECK(curl_from("127.0.0.2", callbacks + "/status",
                    bearer(kTokenA) + " " + json_body +
                        "--data '{\"status\":\"idle\",\"message\":\"runner successfully "
                        "installed\",\"agent_id\":7}'")
              .status == 200);
    const auto got = agent.service->get(kControllerId, instance_ref("garm-guest-a"));
    REQUIRE(got);
    CHECK(got->os_name == "Debian GNU/Linux");
    CHECK(got->addresses.at(0).address == "127.0.0.2");
    const auto guest = agent.service->guest_status(kControllerId, instance_ref("garm-guest-a"));
    REQUIRE(guest);
    CHECK(guest->runner_status == "idle");
    CHECK(guest->agent_id == std::optional<std::int64_t>(7));
    CHECK(guest->closed);
    CHECK(guest->user_data.empty());

    // Its start, phase by phase, in its details, the event history and the histograms.
    const auto startup =
        agent.service->startup_timeline(kControllerId, instance_ref("garm-guest-a"));
    REQUIRE(startup);
    std::vector<std::string> phases;
    for (const auto& mark : startup->marks) {
      phases.emplace_back(garm_edge::agent::to_string(mark.first));
      CHECK(mark.second >= startup->marks.front().second);
    }
    CHECK(phases == std::vector<std::string>{"received", "defined", "started", "seed_fetched",
                                             "first_status", "idle"});
    const auto events = agent.service->events().recent(kControllerId.str(), "garm-guest-a");
    CHECK(std::any_of(events.begin(), events.end(), [](const auto& event) {
      return event.event == "startup" && event.detail.starts_with("ready in ");
    }));
    const auto metrics = agent.service->startup().render_metrics();
    CHECK_THAT(metrics, Catch::Contains("garm_edge_startup_seconds_count{start=\"cold\""));
    CHECK_THAT(metrics, Catch::Contains("garm_edge_startups_in_progress 1\n"));  // B

    CHECK(curl_from("127.0.0.2", metadata + "/credentials/runner", bearer(kTokenA)).status == 404);
    CHECK_FALSE(read_seed(agent.seed_url("garm-guest-a"), "127.0.0.2").ok);
    // B is untouched.
    const auto registration =
        curl_from("127.0.0.3", metadata + "/runner-registration-token/", bearer(kTokenB));
    CHECK(registration.status == 200);
    CHECK(registration.body == "REG-B");
  }

  // What the fake garm saw: every call with the guest's own bearer token, both slash forms.
  std::vector<std::string> paths;
  for (const auto& request : garm.requests()) {
    const auto authorization = request["headers"].value("Authorization", "");
    CHECK((authorization == "Bearer " + kTokenA || authorization == "Bearer " + kTokenB));
    paths.push_back(request["path"]);
  }
  CHECK(std::find(paths.begin(), paths.end(), "/api/v1/metadata/install-script/") != paths.end());
  CHECK(std::find(paths.begin(), paths.end(), "/api/v1/callbacks/status") != paths.end());
}

TEST_CASE("a guest that keeps guessing is rate limited", "[guests][integration]") {
  FakeGarm garm(two_instances());
  GuestHost agent(garm);
  agent.service->create(kControllerId, agent.bootstrap("garm-guest-a", kTokenA));
  agent.service->create(kControllerId, agent.bootstrap("garm-guest-b", kTokenB));
  const std::string guess = agent.base_url() + "/" + std::string(43, 'A') + "/meta-data";
  int last = 0;
  for (int i = 0; i < 22; ++i) {
    last = curl_from("127.0.0.2", guess, "").status;
  }
  CHECK(last == 429);
  CHECK(curl_from("127.0.0.3", guess, "").status == 404);  // others are not affected
  // An address that is no guest's does not even get a connection (curl's status 000).
  CHECK(curl_from("127.0.0.9", guess, "").status == 0);
}

TEST_CASE("in direct mode guests keep garm's URLs and the agent relays nothing",
          "[guests][integration]") {
  FakeGarm garm(two_instances());
  GuestHost agent(garm, false);
  const auto bootstrap = agent.bootstrap("garm-direct1", kTokenA);
  agent.service->create(kControllerId, bootstrap);
  const auto read = read_seed(agent.seed_url("garm-direct1"), "127.0.0.2");
  REQUIRE(read.ok);
  const std::string user_data = read.documents["user_data"];
  CHECK(user_data.find(wire::base64_encode(wrapper_for(bootstrap))) != std::string::npos);
  CHECK(
      curl_from("127.0.0.2", agent.base_url() + "/api/v1/metadata/install-script/", bearer(kTokenA))
          .status == 404);
  CHECK(garm.requests().empty());
}

TEST_CASE("the relay forwards only garm's instance endpoints, to the right base",
          "[guests][integration]") {
  FakeGarm garm(two_instances());
  GuestHost agent(garm);
  auto bootstrap = agent.bootstrap("garm-guest-a", kTokenA);
  bootstrap.callback_url += "/status";  // garm allows a callback URL that already ends in it
  agent.service->create(kControllerId, bootstrap);
  const auto status = curl_from("127.0.0.2", agent.base_url() + "/api/v1/callbacks/status/",
                                bearer(kTokenA) +
                                    " -H 'Content-Type: application/json' --data "
                                    "'{\"status\":\"installing\",\"message\":\"x\"}'");
  CHECK(status.status == 200);
  for (const auto* path : {"/api/v1/metadata/../../auth/login", "/api/v1/metadata/%2e%2e/x",
                           "/api/v1/metadata//install-script", "/api/v1/callbacks/other",
                           "/api/v1/metadata/webhooks"}) {
    CHECK(
        curl_from("127.0.0.2", agent.base_url() + path, "--path-as-is " + bearer(kTokenA)).status ==
        404);
  }
  const auto requests = garm.requests();
  REQUIRE(requests.size() == 1);
  CHECK(requests[0]["path"] == "/api/v1/callbacks/status/");
}

TEST_CASE("an unreadable record fails its guest's request, not the agent",
          "[guests][integration]") {
  FakeGarm garm(two_instances());
  GuestHost agent(garm);
  agent.service->create(kControllerId, agent.bootstrap("garm-guest-a", kTokenA));
  const auto seed = agent.seed_url("garm-guest-a");
  std::ofstream(agent.host.config.state_dir / "instances" /
                (agent::domain_name_for(kController, "garm-guest-a") + ".json"))
      << "{ not json";
  CHECK(curl_from("127.0.0.2", seed + "meta-data", "").status == 503);
  // Reconcile must not release the address an unreadable record may still hold.
  CHECK(agent.service->reconcile().orphan_reservations == 0);
  CHECK(agent.host.hypervisor.network("edge-net").hosts.size() == 1);
}

namespace {

/// Opens `count` connections from `source` to the guest service and leaves them idle.
std::vector<asio::ip::tcp::socket> hold_connections(asio::io_context& io, std::uint16_t port,
                                                    const std::string& source, int count) {
  std::vector<asio::ip::tcp::socket> held;
  const asio::ip::tcp::endpoint server(asio::ip::make_address("127.0.0.1"), port);
  for (int i = 0; i < count; ++i) {
    asio::ip::tcp::socket socket(io);
    socket.open(asio::ip::tcp::v4());
    socket.bind({asio::ip::make_address(source), 0});
    socket.connect(server);
    held.push_back(std::move(socket));
  }
  return held;
}

/// Whether the server closed `socket` (within 2 s): a read sees the end instead of waiting.
bool closed_by_server(asio::ip::tcp::socket& socket) {
  pollfd ready{.fd = socket.native_handle(), .events = POLLIN, .revents = 0};
  std::array<char, 1> byte{};
  return ::poll(&ready, 1, 2000) == 1 && ::recv(socket.native_handle(), byte.data(), 1, 0) <= 0;
}

}  // namespace

TEST_CASE("addresses that are no guest's are closed at accept, a guest cannot take every slot",
          "[guests][integration][hostile]") {
  FakeGarm garm(two_instances());
  GuestHost agent(garm, true,
                  [](agent::AgentConfig& config) { config.guests.max_connections = 16; });
  agent.service->create(kControllerId, agent.bootstrap("garm-guest-a", kTokenA));
  agent.service->create(kControllerId, agent.bootstrap("garm-guest-b", kTokenB));
  const auto port = agent.access.port();
  asio::io_context io;
  // 32 strangers with 16 connections each: none is kept.
  std::vector<asio::ip::tcp::socket> strangers;
  for (int address = 100; address < 132; ++address) {
    for (auto& socket : hold_connections(io, port, "127.0.0." + std::to_string(address), 16)) {
      strangers.push_back(std::move(socket));
    }
  }
  CHECK(std::all_of(strangers.begin(), strangers.end(), closed_by_server));
  // Guest B takes every slot with idle connections (its 17th is refused: its own cap) ...
  auto held = hold_connections(io, port, "127.0.0.3", 17);
  CHECK(closed_by_server(held.back()));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  CHECK(agent.server->open_connections() == 16);
  // ... and guest A's calls to garm are still answered, each taking one of B's idle slots.
  const auto report = status_report(kTokenA, "installing", "step");
  int answered = 0;
  for (int i = 0; i < 11; ++i) {
    answered +=
        curl_from("127.0.0.2", agent.base_url() + "/api/v1/callbacks/status", report).status == 200
            ? 1
            : 0;
  }
  CHECK(answered == 11);
  CHECK(agent.server->evictions() >= 1);
}

TEST_CASE("a guest reporting in a loop is relayed every time but recorded once",
          "[guests][integration][hostile]") {
  FakeGarm garm(two_instances());
  GuestHost agent(garm);
  agent.service->create(kControllerId, agent.bootstrap("garm-guest-a", kTokenA));
  const auto report = status_report(kTokenA, "installing", "same step");
  for (int i = 0; i < 30; ++i) {
    REQUIRE(curl_from("127.0.0.2", agent.base_url() + "/api/v1/callbacks/status", report).status ==
            200);
  }
  std::size_t recorded = 0;
  for (const auto& event : agent.service->events().recent(kController, "garm-guest-a")) {
    recorded += event.event == "guest-installing" ? 1U : 0U;
  }
  CHECK(recorded == 1);
  CHECK(agent.guests->counters().reports_coalesced == 29);
  std::size_t relayed = 0;
  for (const auto& request : garm.requests()) {
    relayed += request["path"] == "/api/v1/callbacks/status" ? 1U : 0U;
  }
  CHECK(relayed == 30);  // garm saw every one
}

TEST_CASE("a guest's reports during its own graceful stop are answered at once, recorded after",
          "[guests][integration][hostile]") {
  FakeGarm garm(two_instances());
  GuestHost agent(garm);
  agent.service->create(kControllerId, agent.bootstrap("garm-guest-a", kTokenA));
  agent.service->create(kControllerId, agent.bootstrap("garm-guest-b", kTokenB));
  // A guest that ignores ACPI: the stop holds A's instance for stop_grace (here until let go).
  std::promise<void> stopping;
  std::promise<void> let_go;
  auto let_go_signal = let_go.get_future().share();
  agent.hypervisor.before = [&stopping, let_go_signal](const std::string& operation) {
    if (operation == "shutdown") {
      stopping.set_value();
      let_go_signal.wait();
    }
  };
  auto stop = std::async(std::launch::async, [&agent] {
    agent.service->stop(kControllerId, instance_ref("garm-guest-a"), false);
  });
  stopping.get_future().wait();
  const auto report = [](const std::string& token, const std::string& status) {
    return status_report(token, status, "step");
  };
  // A reports more often than there are relay workers; then B reports.
  std::vector<std::future<CurlAnswer>> reports;
  const std::set<std::string> statuses{"installing", "configuring", "starting", "registering",
                                       "waiting"};
  for (const auto& status : statuses) {
    reports.push_back(std::async(std::launch::async, [&agent, &report, status] {
      return curl_from("127.0.0.2", agent.base_url() + "/api/v1/callbacks/status",
                       report(kTokenA, status));
    }));
  }
  auto from_b = std::async(std::launch::async, [&agent, &report] {
    return curl_from("127.0.0.3", agent.base_url() + "/api/v1/callbacks/status",
                     report(kTokenB, "installing"));
  });
  const auto answered_in_time = [](auto& future) {
    return future.wait_for(std::chrono::seconds(5)) == std::future_status::ready;
  };
  std::size_t a_answered = 0;
  for (auto& future : reports) {
    a_answered += answered_in_time(future) ? 1U : 0U;
  }
  const bool b_answered = answered_in_time(from_b);
  const auto during_stop = agent.service->guest_status(kControllerId, instance_ref("garm-guest-a"));
  let_go.set_value();
  stop.get();
  CHECK(a_answered == 5);  // without deferral: 0, each held a relay worker behind the stop
  CHECK(b_answered);
  for (auto& future : reports) {
    CHECK(future.get().status == 200);
  }
  CHECK(from_b.get().status == 200);
  REQUIRE(during_stop);
  CHECK(during_stop->runner_status.empty());  // not written while the stop held the instance
  const auto after_stop = agent.service->guest_status(kControllerId, instance_ref("garm-guest-a"));
  REQUIRE(after_stop);
  CHECK(statuses.contains(after_stop->runner_status));  // written as the stop let go
  CHECK(after_stop->messages.size() == 5);
}

TEST_CASE("one controller's slow garm holds half the relay workers, never the other's share",
          "[guests][integration][hostile]") {
  auto options = two_instances();
  options.instances[kTokenA]["answer_delay"] = 6;  // controller A's garm is slow
  // Controller A's four guests at 127.0.0.2-5, B's at 127.0.0.6.
  std::vector<std::string> a_tokens;
  for (int i = 0; i < 4; ++i) {
    a_tokens.push_back("eyJhbGciOiJIUzI1NiJ9.guest-a" + std::to_string(i) + ".signature");
    options.instances[a_tokens.back()] = options.instances[kTokenA];
  }
  FakeGarm garm(options);
  GuestHost agent(garm);  // 4 relay workers
  for (std::size_t i = 0; i < a_tokens.size(); ++i) {
    agent.service->create(kOtherControllerId,
                          agent.bootstrap("garm-guest-a" + std::to_string(i), a_tokens[i]));
  }
  agent.service->create(kControllerId, agent.bootstrap("garm-guest-b", kTokenB));
  const auto url = agent.base_url() + "/api/v1/callbacks/status";
  // One call from each of A's guests: each within its own share, together every worker.
  std::vector<std::future<CurlAnswer>> slow;
  for (std::size_t i = 0; i < a_tokens.size(); ++i) {
    slow.push_back(std::async(std::launch::async, [&, i] {
      return curl_from("127.0.0." + std::to_string(i + 2), url,
                       status_report(a_tokens[i], "installing", "step"));
    }));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const auto started = std::chrono::steady_clock::now();
  const auto from_b = curl_from("127.0.0.6", url, status_report(kTokenB, "installing", "step"));
  const auto took = std::chrono::steady_clock::now() - started;
  CHECK(from_b.status == 200);
  CHECK(took < std::chrono::seconds(4));  // without the controller's share: about 6 s
  for (auto& call : slow) {
    CHECK(call.get().status == 200);  // A's waited in their own queues, none was refused
  }
}

TEST_CASE("a guest repeating its system information costs no record write",
          "[guests][integration][hostile]") {
  FakeGarm garm(two_instances());
  GuestHost agent(garm);
  agent.service->create(kControllerId, agent.bootstrap("garm-guest-a", kTokenA));
  const auto url = agent.base_url() + "/api/v1/callbacks/system-info/";
  const auto info = [](const std::string& version) {
    return bearer(kTokenA) + " -H 'Content-Type: application/json' --data '{\"os_name\":" +
           "\"debian\",\"os_version\":\"" + version + "\",\"agent_id\":7}'";
  };
  const auto record_file = agent.host.config.state_dir / "instances" /
                           (agent::domain_name_for(kController, "garm-guest-a") + ".json");
  const auto written_as = [&record_file] {  // every write makes a new file: its birth moment
    struct stat file {};
    REQUIRE(::stat(record_file.c_str(), &file) == 0);
    return std::tuple(file.st_ino, file.st_mtim.tv_sec, file.st_mtim.tv_nsec);
  };
  REQUIRE(curl_from("127.0.0.2", url, info("12")).status == 200);
  const auto first = written_as();
  for (int i = 0; i < 10; ++i) {
    REQUIRE(curl_from("127.0.0.2", url, info("12")).status == 200);
  }
  CHECK(written_as() == first);  // before: ten writes
  REQUIRE(curl_from("127.0.0.2", url, info("13")).status == 200);
  CHECK(written_as() != first);
  const auto guest = agent.service->guest_status(kControllerId, instance_ref("garm-guest-a"));
  REQUIRE(guest);
  CHECK(guest->os_version == "13");
  CHECK(guest->agent_id == 7);
  CHECK(agent.guests->counters().reports_coalesced == 10);
  // Alternating versions: 20 recorded a minute (two so far), the rest not.
  for (int i = 0; i < 30; ++i) {
    REQUIRE(curl_from("127.0.0.2", url, info(i % 2 == 0 ? "12" : "13")).status == 200);
  }
  CHECK(agent.guests->counters().reports_coalesced == 10 + 12);
}

TEST_CASE("a bootstrap the user-data renderer refuses is garm's error, logged with its name",
          "[guests][hostile]") {
  FakeGarm fake_garm;
  GuestHost host(fake_garm);
  struct Case {
    std::string what;
    std::string field;
    std::function<void(wire::BootstrapInstance&)> spoil;
  };
  const std::vector<Case> cases = {
      {"quote in a proxy", "proxy_config.http_proxy",
       [](auto& b) { b.proxy_config.http_proxy = "http://proxy\"; rm -rf /"; }},
      {"backslash in a proxy", "proxy_config.no_proxy",
       [](auto& b) { b.proxy_config.no_proxy = "a\\b"; }},
      {"newline in an ssh key", "ssh-keys[0]",
       [](auto& b) { b.ssh_keys = std::vector<std::string>{"ssh-ed25519 AAAA\nruncmd: x"}; }},
      {"no runner for the guest's OS and arch (built-in installer)", "tools",
       [](auto& b) {
         b.extra_specs.reset();
         b.tools =
             std::vector<wire::RunnerApplicationDownload>{{.os = "osx",
                                                           .architecture = "arm64",
                                                           .download_url = "https://x/y.tar.gz",
                                                           .filename = "y.tar.gz",
                                                           .temp_download_token = {},
                                                           .sha256_checksum = {}}};
       }},
  };
  for (const auto& c : cases) {
    INFO(c.what);
    auto bootstrap = host.bootstrap("garm-refused01", kTokenA);
    c.spoil(bootstrap);
    try {
      host.service->create(kControllerId, bootstrap);
      FAIL("the create was accepted");
    } catch (const agent::ServiceError& e) {
      CHECK(e.code() == agent::ServiceError::Code::invalid_argument);
      CHECK_THAT(e.what(), Catch::Contains(c.field));
    }
    const auto lines = host.host.log.lines();
    REQUIRE_FALSE(lines.empty());
    CHECK_THAT(lines.back(), Catch::Contains("garm-refused01") && Catch::Contains(c.field));
  }
  CHECK(host.host.tagged_domain_count() == 0);
  CHECK(host.host.store.list().empty());
}

TEST_CASE("guests get their runner archive from the agent: one download, verified, their own only",
          "[guests][integration][runner-archives]") {
  TempDir downloads("downloads");
  std::string archive(3 << 20U, '\0');
  for (std::size_t i = 0; i < archive.size(); ++i) {
    archive[i] = static_cast<char>((i * 7919U) >> 5U);
  }
  std::ofstream(downloads.path() / "runner.tar.gz", std::ios::binary) << archive;
  std::ofstream(downloads.path() / "tampered.tar.gz", std::ios::binary) << "not the archive";
  const auto sha256 = net::sha256_hex(archive);
  // The install script names the tool's URL as garm's does (DOWNLOAD_URL="{{ .DownloadURL }}").
  const std::string script =
      "#!/bin/bash\nDOWNLOAD_URL=\"@GARM_URL@/redirect/runner.tar.gz\"\n# install\n";
  FakeGarmOptions options;
  options.instances = {{kTokenA, {{"install_script", script}}},
                       {kTokenB, nlohmann::json::object()}};
  options.downloads = downloads.path();
  options.download_rate = 4 << 20U;  // 0.75 s for the archive: the guests' requests overlap
  FakeGarm garm(options);
  GuestHost agent(garm);
  const auto with_tool = [&](wire::BootstrapInstance b, const std::string& file,
                             const std::string& checksum) {
    auto& tool = b.tools->front();
    tool.download_url = garm.base_url() + "/redirect/" + file;
    tool.sha256_checksum = checksum;
    return b;
  };
  const std::vector<std::string> names = {"garm-guest-a", "garm-guest-b", "garm-guest-c"};
  agent.service->create(kControllerId,
                        with_tool(agent.bootstrap(names[0], kTokenA), "runner.tar.gz", sha256));
  agent.service->create(kControllerId,
                        with_tool(agent.bootstrap(names[1], kTokenB), "runner.tar.gz", sha256));
  agent.service->create(kControllerId, with_tool(agent.bootstrap(names[2], "token-c"),
                                                 "tampered.tar.gz", std::string(64, 'e')));
  const auto archive_url = agent.base_url() + "/runner-archives/" + sha256;

  const auto installer = curl_from(
      "127.0.0.2", agent.base_url() + "/api/v1/metadata/install-script/", bearer(kTokenA));
  REQUIRE(installer.status == 200);
  CHECK_THAT(installer.body, Catch::Contains("DOWNLOAD_URL=\"" + archive_url + "\"\n"));

  std::vector<std::future<CurlAnswer>> guests;
  for (const auto* address : {"127.0.0.2", "127.0.0.3", "127.0.0.2", "127.0.0.3"}) {
    guests.push_back(std::async(std::launch::async, [address, &archive_url] {
      return curl_from(address, archive_url, "");
    }));
  }
  for (auto& guest : guests) {
    const auto got = guest.get();
    CHECK(got.status == 200);
    CHECK(got.body == archive);
  }
  std::size_t fetched = 0;
  for (const auto& request : garm.requests()) {
    fetched += request["path"] == "/downloads/runner.tar.gz" ? 1U : 0U;
  }
  CHECK(fetched == 1);  // one download for the host, whatever the create's prefetch did

  // A stranger gets no connection; a guest asking for an archive it was not given, the
  // uniform 404.
  CHECK(curl_from("127.0.0.9", archive_url, "").status == 0);
  CHECK(curl_from("127.0.0.4", archive_url, "").status == 404);
  // An archive whose SHA-256 is not garm's is refused with the reason, and never served.
  const auto tampered =
      curl_from("127.0.0.4", agent.base_url() + "/runner-archives/" + std::string(64, 'e'), "");
  CHECK(tampered.status == 502);
  CHECK_THAT(tampered.body, Catch::Contains("SHA-256"));
  CHECK_THAT(tampered.body, Catch::Contains(net::sha256_hex("not the archive")));
}

namespace {

/// An assignment without the lines that change with each answer: the agent's clock and entropy.
std::string without_served_lines(std::string assignment) {
  for (const char* name : {"\nAGENT_TIME=", "\nAGENT_ENTROPY="}) {
    const auto line = assignment.find(name);
    REQUIRE(line != std::string::npos);
    assignment.erase(line + 1, assignment.find('\n', line + 1) - line);
  }
  return assignment;
}

void warm_one(agent::AgentConfig& config) {
  config.warm = {{.controller = kController,
                  .image = "debian-12",
                  .flavor = "small",
                  .count = 1,
                  .ready_timeout = std::chrono::seconds(600),
                  .name = "debian-12/small for " + kController}};
}

/// The runner archive a warm guest unpacks while warming (its seed's ARCHIVE_SHA256; empty:
/// none), from its record.
std::string warm_archive_of(agent::InstanceStore& store, const agent::InstanceRecord& warm) {
  const auto record = store.get(warm.domain_name);
  REQUIRE(record);
  REQUIRE(record->guest);
  return shell_value(install_script_of(record->guest->user_data), "ARCHIVE_SHA256");
}

/// garm's bootstrap with its runner tool's checksum set to `sha256`.
wire::BootstrapInstance with_runner_sha256(wire::BootstrapInstance bootstrap,
                                           const std::string& sha256) {
  bootstrap.tools->front().sha256_checksum = sha256;
  return bootstrap;
}

class OffsetClock final : public agent::Clock {
 public:
  explicit OffsetClock(std::chrono::seconds offset) : offset_(offset) {}
  std::chrono::system_clock::time_point now() const override {
    return std::chrono::system_clock::now() + offset_;
  }

 private:
  std::chrono::seconds offset_;
};

}  // namespace

TEST_CASE("a warm guest waits with no garm secret, then garm's create binds it at once",
          "[guests][integration][warm]") {
  FakeGarm garm(two_instances());
  GuestHost agent(garm, true, warm_one);
  agent::WarmPool pool(*agent.service, agent.host.clock, agent.host.log);
  REQUIRE(pool.pass().started == 1);
  auto warm = agent.service->warm_guests();
  REQUIRE(warm.size() == 1);
  const auto warm_domain = warm.front().domain_name;
  const auto warm_uuid = warm.front().domain_uuid;
  CHECK(warm.front().warm->state == agent::WarmState::warming);
  CHECK(agent.service->list(kControllerId, pool_id(kPool)).empty());
  const auto warm_counts = [&] {
    const auto counts = agent.service->capacity().warm;
    REQUIRE(counts.size() == 1);
    return std::pair{counts.front().ready, counts.front().warming};
  };
  CHECK(warm_counts() == std::pair<std::size_t, std::size_t>{0, 1});
  // Placement's warm-only try is refused while no guest is ready, and makes nothing.
  try {
    agent.service->create(kControllerId, agent.bootstrap("garm-guest-b", kTokenB),
                          agent::InstanceService::WarmUse::only);
    FAIL("a warm-only create was taken with no warm guest ready");
  } catch (const agent::ServiceError& e) {
    CHECK(e.code() == agent::ServiceError::Code::no_capacity);
    CHECK_THAT(e.what(), Catch::Contains("no warm guest of image debian-12"));
  }
  CHECK(agent.service->list(kControllerId, pool_id(kPool)).empty());

  // What the warm guest boots with: its own token and the agent's address, nothing of garm's.
  const auto seed = read_seed(
      agent.serials.at(warm_domain).substr(std::string("ds=nocloud-net;s=").size()), "127.0.0.2");
  REQUIRE(seed.ok);
  const std::string user_data = seed.documents["user_data"];
  CHECK(user_data.find("garm.example.com") == std::string::npos);
  const auto script = install_script_of(user_data);
  CHECK(shell_value(script, "AGENT_URL") == agent.base_url());
  const auto token = shell_value(script, "WARM_TOKEN");
  const auto warm_url = agent.base_url() + "/warm/";

  // Its token works only from its own address (no other guest's is even served), and reaches
  // garm for nothing.
  CHECK(curl_from("127.0.0.3", warm_url + "ready", bearer(token) + " -X POST").status == 0);
  CHECK(curl_from("127.0.0.2", agent.base_url() + "/api/v1/metadata/install-script/", bearer(token))
            .status == 404);
  CHECK(curl_from("127.0.0.2", warm_url + "assignment", bearer(token)).status == 204);
  CHECK(curl_from("127.0.0.2", warm_url + "ready", bearer(token) + " -X POST").status == 200);
  REQUIRE(agent.service->warm_guests().front().warm->state == agent::WarmState::ready);
  CHECK(warm_counts() == std::pair<std::size_t, std::size_t>{1, 0});  // what placement is told

  // As the guest asks: held until garm's create binds it, without holding a worker.
  auto held = std::async(std::launch::async, [&] {
    return curl_from("127.0.0.2", warm_url + "assignment?wait=30", bearer(token));
  });
  while (agent.guests->assignment_polls() == 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  CHECK(curl_from("127.0.0.2", warm_url + "assignment?wait=30", bearer("not-its-token")).status ==
        404);

  // garm's create takes it: running at once, garm's names on the same domain.
  const auto started = std::chrono::steady_clock::now();
  const auto created =
      agent.service->create(kControllerId, agent.bootstrap("garm-guest-a", kTokenA));
  const auto took = std::chrono::steady_clock::now() - started;
  REQUIRE(held.wait_for(std::chrono::seconds(10)) == std::future_status::ready);
  const auto held_answer = held.get();
  CHECK(held_answer.status == 200);
  CHECK_THAT(held_answer.body, Catch::Contains("hostnamectl set-hostname 'garm-guest-a'"));
  CHECK(took < std::chrono::seconds(1));
  CHECK(created.provider_id == warm_uuid);
  CHECK(created.name == "garm-guest-a");
  CHECK(created.status == wire::InstanceStatus::running);
  REQUIRE(created.addresses.size() == 1);
  CHECK(created.addresses.at(0).address == "127.0.0.2");
  CHECK(agent.service->warm_guests().empty());
  CHECK(warm_counts() == std::pair<std::size_t, std::size_t>{0, 0});
  const auto listed = agent.service->list(kControllerId, pool_id(kPool));
  REQUIRE(listed.size() == 1);
  CHECK(listed.at(0).name == "garm-guest-a");
  CHECK(agent.service->get(kControllerId, instance_ref("garm-guest-a"))->provider_id == warm_uuid);

  // The assignment is handed over once, to the warm guest's token from its address.
  CHECK(curl_from("127.0.0.3", warm_url + "assignment", bearer(token)).status == 0);
  const auto assignment = curl_from("127.0.0.2", warm_url + "assignment", bearer(token));
  REQUIRE(assignment.status == 200);
  CHECK_THAT(assignment.body, Catch::Contains("hostnamectl set-hostname 'garm-guest-a'"));
  CHECK_THAT(assignment.body, Catch::Contains("su -l -c /install_runner.sh runner"));
  // An answer lost on the way can be fetched again, until the guest runs it: its first call
  // to garm, with garm's token, through the relay.
  // Each answer carries the agent's clock when served: a restored guest steps its clock to it.
  const auto time_line = assignment.body.find("\nAGENT_TIME=");
  REQUIRE(time_line != std::string::npos);
  const auto agent_time = std::stod(assignment.body.substr(time_line + 12, 14));
  CHECK(std::abs(agent_time -
                 std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
                     .count()) < 5);
  CHECK(without_served_lines(curl_from("127.0.0.2", warm_url + "assignment", bearer(token)).body) ==
        without_served_lines(assignment.body));
  std::size_t fetches_recorded = 0;  // a guest fetching in a loop does not flood the history
  for (const auto& event : agent.service->events().recent(kController, "garm-guest-a")) {
    fetches_recorded += event.event == "warm-assignment" ? 1U : 0U;
  }
  CHECK(fetches_recorded == 1);
  const auto installer = curl_from(
      "127.0.0.2", agent.base_url() + "/api/v1/metadata/install-script/", bearer(kTokenA));
  CHECK(installer.status == 200);
  CHECK_THAT(installer.body, Catch::Contains("# install A"));
  CHECK(curl_from("127.0.0.2", warm_url + "assignment", bearer(token)).status == 404);
  CHECK(agent.service->guest_status(kControllerId, instance_ref("garm-guest-a")).has_value());

  SECTION("garm's retried create returns the bound instance and binds nothing else") {
    REQUIRE(pool.pass().started == 1);  // the refill
    const auto again =
        agent.service->create(kControllerId, agent.bootstrap("garm-guest-a", kTokenA));
    CHECK(again.provider_id == warm_uuid);
    CHECK(agent.service->warm_guests().size() == 1);
    CHECK(agent.service->warm_bound() == 1);
  }
  SECTION("garm's delete by provider ID removes the bound guest") {
    CHECK(agent.service->remove(kControllerId, instance_ref(warm_uuid)));
    CHECK_FALSE(agent.host.hypervisor.find_by_uuid(warm_uuid));
  }
  SECTION("garm's delete by name removes the bound guest and its address") {
    CHECK(agent.service->remove(kControllerId, instance_ref("garm-guest-a")));
    CHECK_FALSE(agent.host.hypervisor.find_by_uuid(warm_uuid));
    CHECK_FALSE(agent.service->get(kControllerId, instance_ref("garm-guest-a")));
    CHECK(agent.host.hypervisor.network("edge-net").hosts.empty());
  }
}

TEST_CASE("the warm pool refills within capacity, retires changed settings and wastes the late",
          "[guests][integration][warm]") {
  FakeGarm garm(two_instances());
  GuestHost agent(garm, true, warm_one);
  agent::WarmPool pool(*agent.service, agent.host.clock, agent.host.log);
  REQUIRE(pool.pass().started == 1);
  CHECK(pool.pass().started == 0);  // count reached
  CHECK(agent.service->warm_guests().size() == 1);

  SECTION("a create with no ready warm guest is a cold create") {
    const auto cold =
        agent.service->create(kControllerId, agent.bootstrap("garm-guest-a", kTokenA));
    CHECK(cold.provider_id != agent.service->warm_guests().front().domain_uuid);
    CHECK(agent.service->warm_guests().size() == 1);
  }
  SECTION("lowering the count retires the least useful guests: warming before ready") {
    agent.host.config.warm.front().count = 2;
    REQUIRE(pool.pass().started == 1);
    const auto guests = agent.service->warm_guests();
    REQUIRE(guests.size() == 2);
    const auto& newest = guests[0].created_at > guests[1].created_at ? guests[0] : guests[1];
    REQUIRE(agent.service->mark_warm_ready(newest.domain_name));
    agent.host.config.warm.front().count = 1;
    CHECK(pool.pass().retired == 1);
    const auto kept = agent.service->warm_guests();
    REQUIRE(kept.size() == 1);
    CHECK(kept.front().domain_name == newest.domain_name);
    agent.host.config.warm.front().count = 0;
    CHECK(pool.pass().retired == 1);
    CHECK(agent.service->warm_guests().empty());
  }
  SECTION("a warm guest whose domain stopped is replaced") {
    const auto stopped = agent.service->warm_guests().front();
    agent.host.hypervisor.destroy(stopped.domain_uuid);
    const auto pass = pool.pass();
    CHECK(pass.retired == 1);
    CHECK(pass.started == 1);
    const auto now = agent.service->warm_guests();
    REQUIRE(now.size() == 1);
    CHECK(now.front().domain_uuid != stopped.domain_uuid);
  }
  SECTION("a binding that fails leaves no second instance of garm's name") {
    const auto warm = agent.service->warm_guests().front();
    REQUIRE(agent.service->mark_warm_ready(warm.domain_name));
    SECTION("refused: the warm guest stays ready, the create goes cold") {
      auto refused = std::make_shared<bool>(false);
      agent.hypervisor.before = [refused](const std::string& operation) {
        if (operation == "set_tags" && !*refused) {
          *refused = true;
          throw hypervisor::HypervisorError(hypervisor::HypervisorError::Kind::failed, "refused");
        }
      };
      const auto cold =
          agent.service->create(kControllerId, agent.bootstrap("garm-guest-a", kTokenA));
      CHECK(cold.provider_id != warm.domain_uuid);
      REQUIRE(agent.service->warm_guests().size() == 1);
      CHECK(agent.service->warm_guests().front().warm->state == agent::WarmState::ready);
    }
    SECTION("taken effect but reported failed: the warm guest is removed") {
      agent.hypervisor.fail_after("set_tags");
      const auto cold =
          agent.service->create(kControllerId, agent.bootstrap("garm-guest-a", kTokenA));
      CHECK(cold.provider_id != warm.domain_uuid);
      CHECK_FALSE(agent.host.hypervisor.find_by_uuid(warm.domain_uuid));
    }
    CHECK(agent.service->list(kControllerId, pool_id(kPool)).size() == 1);
  }
  SECTION("a changed flavor retires guests made under the old one") {
    agent.host.config.flavors.front().memory_mib += 256;
    const auto pass = pool.pass();
    CHECK(pass.retired == 1);
    CHECK(pass.started == 1);
    CHECK(agent.service->warm_guests().size() == 1);
  }
  SECTION("a guest not ready within its deadline is destroyed and counted wasted") {
    OffsetClock later(std::chrono::hours(1));
    agent::WarmPool late_pool(*agent.service, later, agent.host.log);
    CHECK(late_pool.pass().expired == 1);
    CHECK_THAT(late_pool.render_metrics(),
               Catch::Contains("garm_edge_warm_guests_total{event=\"wasted\"} 1"));
  }
  SECTION("a warm guest never takes the last slot a cold create needs") {
    agent.host.config.warm.front().count = 50;
    for (int i = 0; i < 60; ++i) {
      pool.pass();
    }
    const auto report = agent.service->capacity();
    const auto& flavor = agent.host.config.flavors.front();
    CHECK(report.used.memory_mib + flavor.memory_mib <= report.limit.memory_mib);
  }
  SECTION("after a restart the warm guest is still known, admitted and bindable") {
    const auto warm = agent.service->warm_guests().front();
    REQUIRE(agent.service->mark_warm_ready(warm.domain_name));
    const auto restarted = agent.host.service(agent.hypervisor, agent.host.store);
    restarted->serve_guests(agent.attachments);
    REQUIRE(restarted->warm_guests().size() == 1);
    // Its owner is in its record and on its domain: the restarted agent still keeps it from
    // another controller's create.
    CHECK(agent.host.hypervisor.find_by_uuid(warm.domain_uuid)->tags.get("warm-controller-id") ==
          std::optional<std::string_view>(kController));
    const auto other =
        restarted->create(kOtherControllerId, agent.bootstrap("garm-other", "token-other"));
    CHECK(other.provider_id != warm.domain_uuid);
    const auto bound = restarted->create(kControllerId, agent.bootstrap("garm-guest-a", kTokenA));
    CHECK(bound.provider_id == warm.domain_uuid);
  }
}

TEST_CASE(
    "a warm guest is its controller's alone: another's create never takes it or chooses "
    "what it unpacks",
    "[guests][integration][warm]") {
  FakeGarm garm(two_instances());
  GuestHost agent(garm, true, warm_one);  // [[warm]] for kController only
  agent::WarmPool pool(*agent.service, agent.host.clock, agent.host.log);
  const std::string own_archive(64, 'a');
  const std::string other_archive(64, 'b');
  const std::string refused_archive(64, 'c');
  const std::string repeated_archive(64, 'd');

  // What each next warm guest unpacks: never what a refused create, another controller's create
  // or a repeat of a create chose; only what its own controller's create that succeeded did.
  const auto next_warm_archive = [&] {
    const auto before = agent.service->warm_guests();
    agent.host.config.warm.front().count = before.size() + 1;
    REQUIRE(pool.pass().started == 1);
    const auto now = agent.service->warm_guests();
    const auto added = std::find_if(now.begin(), now.end(), [&](const auto& guest) {
      return std::none_of(before.begin(), before.end(),
                          [&](const auto& old) { return old.domain_name == guest.domain_name; });
    });
    REQUIRE(added != now.end());
    return std::pair{*added, warm_archive_of(agent.host.store, *added)};
  };
  CHECK_THROWS_AS(
      agent.service->create(
          kControllerId,
          with_runner_sha256(agent.bootstrap("garm-refused", "token-refused"), refused_archive),
          agent::InstanceService::WarmUse::only),
      agent::ServiceError);
  CHECK(next_warm_archive().second.empty());
  agent.service->create(
      kOtherControllerId,
      with_runner_sha256(agent.bootstrap("garm-other-1", "token-other-1"), other_archive));
  CHECK(next_warm_archive().second.empty());
  agent.service->create(kControllerId,
                        with_runner_sha256(agent.bootstrap("garm-guest-a", kTokenA), own_archive));
  agent.service->create(kControllerId, with_runner_sha256(agent.bootstrap("garm-guest-a", kTokenA),
                                                          repeated_archive));
  const auto [prepared, prepared_archive] = next_warm_archive();
  CHECK(prepared_archive == own_archive);
  REQUIRE(agent.service->mark_warm_ready(prepared.domain_name));

  // The other controller never receives it: placement's warm-only try is refused, and its
  // create boots a guest of its own.
  try {
    agent.service->create(kOtherControllerId, agent.bootstrap("garm-other-2", "token-other-2"),
                          agent::InstanceService::WarmUse::only);
    FAIL("another controller's warm-only create took this controller's warm guest");
  } catch (const agent::ServiceError& e) {
    CHECK(e.code() == agent::ServiceError::Code::no_capacity);
  }
  const auto other =
      agent.service->create(kOtherControllerId, agent.bootstrap("garm-other-2", "token-other-2"));
  CHECK(other.provider_id != prepared.domain_uuid);
  CHECK(agent.service->warm_guests().size() == 3);
  CHECK(agent.service->warm_bound() == 0);

  // Its own controller's create takes it.
  const auto own = agent.service->create(kControllerId, agent.bootstrap("garm-guest-b", kTokenB));
  CHECK(own.provider_id == prepared.domain_uuid);
  CHECK(agent.service->warm_bound() == 1);
}

TEST_CASE("runner tools kept before they were per controller are nobody's",
          "[guests][integration][warm]") {
  FakeGarm garm(two_instances());
  GuestHost agent(garm, true, warm_one);
  auto tool = *bootstrap_for("x").tools;
  tool.front().sha256_checksum = std::string(64, 'f');
  std::ofstream(agent.host.config.state_dir / "runner-tools.json")
      << nlohmann::json::array({wire::to_json(tool.front())}).dump() << "\n";
  agent::WarmPool pool(*agent.service, agent.host.clock, agent.host.log);
  REQUIRE(pool.pass().started == 1);
  CHECK(warm_archive_of(agent.host.store, agent.service->warm_guests().front()).empty());
}

namespace {

/// A JWT shaped as garm's agent token for `instance` (garm signs it; the relay only reads it).
std::string agent_token_for(const std::string& instance, bool is_agent = true) {
  const auto url_safe = [](std::string text) {
    auto encoded = wire::base64_encode(text);
    std::replace(encoded.begin(), encoded.end(), '+', '-');
    std::replace(encoded.begin(), encoded.end(), '/', '_');
    encoded.erase(encoded.find_last_not_of('=') + 1);
    return encoded;
  };
  const nlohmann::json claims{{"id", "7d3c"}, {"name", instance}, {"is_agent", is_agent}};
  return url_safe(R"({"alg":"HS256","typ":"JWT"})") + "." + url_safe(claims.dump()) + ".c2ln";
}

/// garm-agent's side of the socket (tests/support/ws_client.py) from `source`.
nlohmann::json open_agent_socket(const std::string& url, const std::string& source,
                                 const std::string& token, const std::string& options = "") {
  const auto result = run_command(std::string("/usr/bin/python3 ") + GARM_EDGE_TEST_DATA_DIR +
                                  "/../support/ws_client.py '" + url + "' " + source + " '" +
                                  token + "' " + options);
  INFO(result.output);
  REQUIRE(result.exit_code == 0);
  return nlohmann::json::parse(result.output);
}

std::size_t garm_saw(const FakeGarm& garm, const std::string& method) {
  std::size_t count = 0;
  for (const auto& request : garm.requests()) {
    count += request["method"] == method ? 1U : 0U;
  }
  return count;
}

FakeGarmOptions agent_mode_instances() {
  FakeGarmOptions options;
  const std::string script =
      "#!/bin/bash\nAGENT_URL=\"@AGENT_URL@\"\nAGENT_TOKEN=\"@AGENT_TOKEN@\"\n"
      "DOWNLOAD_URL=\"@GARM_URL@/api/v1/metadata/tools/garm-agent/4f1e/download\"\n";
  options.instances = {
      {kTokenA,
       {{"install_script", script},
        {"agent_token", agent_token_for("garm-guest-a")},
        {"agent_tool_bytes", 100'000'000}}},
      {kTokenB, {{"install_script", script}, {"agent_token", agent_token_for("garm-guest-b")}}},
  };
  return options;
}

/// The peak resident set of this process since the last reset (see reset_peak_rss).
std::size_t peak_rss_kib() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.starts_with("VmHWM:")) {
      return std::stoul(line.substr(6));
    }
  }
  return 0;
}

void reset_peak_rss() {
  std::ofstream("/proc/self/clear_refs") << "5";
}

/// The sockets open once `count` have opened, or after 5 s.
std::size_t sockets_open_within(const agent::AgentSockets& sockets, std::size_t count) {
  for (int i = 0; i < 200 && sockets.open() < count; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  return sockets.open();
}

}  // namespace

TEST_CASE("garm-agent's socket reaches garm through the relay for its own instance only",
          "[guests][integration]") {
  FakeGarm garm(agent_mode_instances());
  GuestHost agent(garm);
  agent.service->create(kControllerId, agent.bootstrap("garm-guest-a", kTokenA));
  agent.service->create(kControllerId, agent.bootstrap("garm-guest-b", kTokenB));
  const auto metadata = agent.base_url() + "/api/v1/metadata";
  const auto socket_url = agent.base_url() + "/agent";
  const auto token_a = agent_token_for("garm-guest-a");

  // The install script garm renders names garm's agent URL: the guest gets the relay's.
  const auto script = curl_from("127.0.0.2", metadata + "/install-script/", bearer(kTokenA));
  REQUIRE(script.status == 200);
  CHECK(script.body.find("AGENT_URL=\"" + socket_url + "\"\n") != std::string::npos);
  CHECK(script.body.find("DOWNLOAD_URL=\"" + metadata + "/tools/garm-agent/4f1e/download\"") !=
        std::string::npos);
  CHECK(script.body.find(garm.base_url()) == std::string::npos);

  const auto opened =
      open_agent_socket(socket_url, "127.0.0.2", token_a, "--send hello --send 'é ✓' --ping");
  CHECK(opened["status"] == 101);
  CHECK(opened["accept_ok"] == true);  // garm's answer to the guest's own key
  CHECK(opened["garm_ping"] == true);
  CHECK(opened["echo"] == nlohmann::json::array({"hello", "é ✓"}));
  CHECK(opened["pong"] == true);
  CHECK(garm_saw(garm, "WS") == 3);
  const auto seen = garm.requests();
  const auto upgrade =
      std::find_if(seen.begin(), seen.end(), [](const auto& r) { return r["path"] == "/agent"; });
  REQUIRE(upgrade != seen.end());
  CHECK((*upgrade)["headers"].value("Authorization", "") == "Bearer " + token_a);
  CHECK_FALSE((*upgrade)["headers"].contains("Origin"));

  SECTION("strangers get the uniform 404 and garm sees nothing of them") {
    // Counted by what a stranger's socket would make garm see, its upgrade: a frame of the
    // socket above may still be on its way to garm's log (seen under qemu-user).
    const auto before = garm_saw(garm, "GET");
    const auto refused = [&](const std::string& source, const std::string& token) {
      const auto answer = open_agent_socket(socket_url, source, token);
      CHECK(answer["status"] == 404);
      CHECK(answer["body"] == "404 page not found\n");
    };
    refused("127.0.0.3", token_a);                                 // B's address, A's token
    refused("127.0.0.2", agent_token_for("garm-guest-b"));         // A's address, B's token
    refused("127.0.0.2", kTokenA);                                 // the instance token
    refused("127.0.0.2", agent_token_for("garm-guest-a", false));  // not an agent token
    CHECK(curl_from("127.0.0.9", socket_url, "").status == 0);     // no instance there
    CHECK(garm_saw(garm, "GET") == before);
  }
  SECTION("garm's refusal comes back as it is") {
    // B's address with a token naming B that garm did not issue.
    const auto forged = agent_token_for("garm-guest-b") + "x";
    const auto answer = open_agent_socket(socket_url, "127.0.0.3", forged);
    CHECK(answer["status"] == 401);
    CHECK(answer["body"] == R"({"error":"Authentication failed","details":""})");
    // Each counts as a miss: a guest that keeps forging is cut off before garm, as for seeds.
    for (int attempt = 1; attempt < 20; ++attempt) {
      REQUIRE(open_agent_socket(socket_url, "127.0.0.3", forged)["status"] == 401);
    }
    const auto upgrades = garm_saw(garm, "GET");
    CHECK(open_agent_socket(socket_url, "127.0.0.3", forged)["status"] == 429);
    CHECK(garm_saw(garm, "GET") == upgrades);
  }
  SECTION("the socket outlives idle, and ends when the instance is deleted") {
    CHECK(curl_from("127.0.0.2", agent.base_url() + "/api/v1/callbacks/status",
                    bearer(kTokenA) + " -H 'Content-Type: application/json' "
                                      "--data '{\"status\":\"idle\",\"message\":\"ok\"}'")
              .status == 200);
    auto holding = std::async(std::launch::async, [&] {
      return open_agent_socket(socket_url, "127.0.0.2", token_a, "--hold 15");
    });
    for (int i = 0; i < 100 && agent.sockets.open() == 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    REQUIRE(agent.sockets.open() == 1);
    CHECK(agent.service->remove(kControllerId, instance_ref("garm-guest-a")));
    const auto held = holding.get();
    CHECK(held["status"] == 101);
    REQUIRE(held["closed_after"].is_number());
    CHECK(held["closed_after"].get<double>() < 2.5);  // idle would take 3 s
    CHECK(agent.sockets.open() == 0);
    // The deleted instance's address is no guest's any more: not even a connection.
    CHECK(curl_from("127.0.0.2", socket_url, bearer(token_a)).status == 0);
  }
  SECTION("a silent socket ends after the idle time; a third of one instance ends its oldest") {
    const auto silent = open_agent_socket(socket_url, "127.0.0.2", token_a, "--hold 10");
    REQUIRE(silent["closed_after"].is_number());
    CHECK(silent["closed_after"].get<double>() > 2.5);
    CHECK(silent["closed_after"].get<double>() < 6);

    // Each pings every second, under the 3 s idle time.
    auto first = std::async(std::launch::async, [&] {
      return open_agent_socket(socket_url, "127.0.0.2", token_a, "--hold 12 --keepalive");
    });
    REQUIRE(sockets_open_within(agent.sockets, 1) == 1);
    auto second = std::async(std::launch::async, [&] {
      return open_agent_socket(socket_url, "127.0.0.2", token_a, "--hold 5 --keepalive");
    });
    REQUIRE(sockets_open_within(agent.sockets, 2) == 2);
    const auto third =
        open_agent_socket(socket_url, "127.0.0.2", token_a, "--hold 1.5 --keepalive");
    CHECK(third["closed_after"].is_null());
    REQUIRE(first.get()["closed_after"].is_number());  // ended when the third opened
    CHECK(second.get()["closed_after"].is_null());
  }
}

TEST_CASE("a 100 MB garm-agent download streams through the relay in bounded memory",
          "[guests][integration]") {
  FakeGarm garm(agent_mode_instances());
  GuestHost agent(garm);
  agent.service->create(kControllerId, agent.bootstrap("garm-guest-a", kTokenA));
  const auto url = agent.base_url() + "/api/v1/metadata/tools/garm-agent/4f1e/download";
  TempDir dir("download");
  const auto file = (dir.path() / "garm-agent").string();

  reset_peak_rss();
  const auto before = peak_rss_kib();
  const auto result =
      run_command("curl -s -m 120 --fail --interface 127.0.0.2 " + bearer(kTokenA) + " -o " + file +
                  " -w '%{http_code} %{size_download}' '" + url + "'");
  const auto growth = peak_rss_kib() - before;
  CHECK(result.output == "200 100000000");
  const auto expected =
      run_command(std::string("/usr/bin/python3 -c 'import sys; sys.path.insert(0, \"") +
                  GARM_EDGE_TEST_DATA_DIR +
                  "/../support\"); import fake_garm; "
                  "print(fake_garm.agent_tool_sha256(100000000))'");
  const auto got = run_command("sha256sum " + file);
  CHECK(got.output.substr(0, 64) == expected.output.substr(0, 64));
  // The relay holds at most its pipe (1 MiB) and a few read buffers per download.
  INFO("peak RSS grew by " << growth << " KiB");
#if !defined(__SANITIZE_ADDRESS__)
  CHECK(growth < 16 * 1024);
#else
  // ASan keeps freed buffers in its quarantine (256 MB by default), so RSS there counts every byte
  // ever allocated, not what is live; the bound is checked by the plain build.
  CHECK(growth < 512 * 1024);
#endif
  UNSCOPED_INFO("relay: 100 MB streamed, peak RSS growth " << growth << " KiB");

  SECTION("a guest that leaves mid-download frees the relay at once") {
    const auto failures = agent.guests->counters().relay_failures.load();
    run_command("curl -s -m 1 --limit-rate 1M --interface 127.0.0.2 " + bearer(kTokenA) +
                " -o /dev/null '" + url + "'");
    // The relay gives up on garm's answer as soon as the guest is gone, not at its deadline.
    for (int i = 0; i < 40 && agent.guests->counters().relay_failures == failures; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    CHECK(agent.guests->counters().relay_failures == failures + 1);
  }
}

TEST_CASE("one guest reading slowly holds one download worker, never every one",
          "[guests][integration][hostile]") {
  auto options = agent_mode_instances();
  // A's is larger than loopback's socket buffers take: a slow reader holds its worker.
  options.instances[kTokenA]["agent_tool_bytes"] = 40'000'000;
  options.instances[kTokenB]["agent_tool_bytes"] = 3'000'000;
  FakeGarm garm(options);
  GuestHost agent(garm);
  agent.service->create(kControllerId, agent.bootstrap("garm-guest-a", kTokenA));
  agent.service->create(kControllerId, agent.bootstrap("garm-guest-b", kTokenB));
  const auto url = agent.base_url() + "/api/v1/metadata/tools/garm-agent/4f1e/download";
  // Guest A starts four downloads and reads each at 20 KB/s (they would take minutes): one
  // runs, the others wait in A's own queue.
  std::vector<std::future<CommandResult>> slow;
  for (int i = 0; i < 4; ++i) {
    slow.push_back(std::async(std::launch::async, [&] {
      return run_command("curl -s -m 8 --limit-rate 20K --interface 127.0.0.2 " + bearer(kTokenA) +
                         " -o /dev/null -w '%{http_code} %{time_starttransfer}' '" + url + "'");
    }));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  // Guest B's download gets a worker at once and finishes.
  const auto started = std::chrono::steady_clock::now();
  const auto fast = run_command("curl -s -m 20 --interface 127.0.0.3 " + bearer(kTokenB) +
                                " -o /dev/null -w '%{http_code} %{size_download}' '" + url + "'");
  const auto took = std::chrono::steady_clock::now() - started;
  CHECK(fast.output == "200 3000000");
  CHECK(took < std::chrono::seconds(5));
  // Got garm's 200 head while the first was still being read (the first ends when its curl
  // gives up at 8 s; a queued one may get the worker in the moment before its own curl does).
  std::size_t answered = 0;
  for (auto& download : slow) {
    std::istringstream words(download.get().output);
    std::string code;
    double first_byte_seconds = 0;
    words >> code >> first_byte_seconds;
    answered += code == "200" && first_byte_seconds < 6.0 ? 1U : 0U;
  }
  CHECK(answered == 1);  // A's other downloads waited in its own queue, holding no worker
}

TEST_CASE(
    "a streamed answer leaves the guest's connection reusable, and one garm cuts off "
    "reaches the guest cut off",
    "[guests][integration]") {
  auto options = agent_mode_instances();
  options.instances[kTokenA]["agent_tool_bytes"] = 3'000'000;  // three times the relay's pipe
  options.instances[kTokenB]["agent_tool_bytes"] = 3'000'000;
  options.instances[kTokenB]["agent_tool_cut_at"] = 1'500'000;
  FakeGarm garm(options);
  GuestHost agent(garm);
  agent.service->create(kControllerId, agent.bootstrap("garm-guest-a", kTokenA));
  agent.service->create(kControllerId, agent.bootstrap("garm-guest-b", kTokenB));
  const auto url = agent.base_url() + "/api/v1/metadata/tools/garm-agent/4f1e/download";

  // Two downloads on one connection: the second reuses it (no new connect).
  const auto twice = run_command("curl -s --interface 127.0.0.2 " + bearer(kTokenA) +
                                 " -o /dev/null '" + url + "' -o /dev/null '" + url +
                                 "' -w '%{http_code} %{size_download} %{num_connects}\\n'");
  CHECK(twice.output == "200 3000000 1\n200 3000000 0\n");
  // An HTTP/1.0 client knows no chunks: it reads the body until the connection closes.
  const auto old_client =
      run_command("curl -s --http1.0 -D - --interface 127.0.0.2 " + bearer(kTokenA) +
                  " -o /dev/null -w '%{size_download}' '" + url + "'");
  CHECK(old_client.exit_code == 0);
  CHECK(old_client.output.find("Transfer-Encoding") == std::string::npos);
  CHECK(old_client.output.ends_with("Connection: close\r\n\r\n3000000"));

  // garm's connection ends mid-body: the guest must not take the half for the whole.
  const auto cut = run_command("curl -s --interface 127.0.0.3 " + bearer(kTokenB) +
                               " -o /dev/null -w '%{size_download}' '" + url + "'");
  CHECK(cut.exit_code == 18);  // CURLE_PARTIAL_FILE: the chunked body never ended
  CHECK(std::stoul(cut.output) < 3'000'000);
  // An HTTP/1.0 client has no chunks to miss: the connection is reset, not ended cleanly.
  const auto cut_old = run_command("curl -s --http1.0 --interface 127.0.0.3 " + bearer(kTokenB) +
                                   " -o /dev/null '" + url + "'");
  CHECK(cut_old.exit_code == 56);  // CURLE_RECV_ERROR: connection reset
}

TEST_CASE("stopping the agent ends garm-agent's sockets without waiting for them",
          "[guests][integration]") {
  FakeGarm garm(agent_mode_instances());
  auto agent = std::make_unique<GuestHost>(garm);
  agent->service->create(kControllerId, agent->bootstrap("garm-guest-a", kTokenA));
  const auto socket_url = agent->base_url() + "/agent";
  auto held = std::async(std::launch::async, [&] {
    return open_agent_socket(socket_url, "127.0.0.2", agent_token_for("garm-guest-a"),
                             "--hold 20 --keepalive");
  });
  REQUIRE(sockets_open_within(agent->sockets, 1) == 1);

  // Each would hold the agent for the socket's 20 s.
  const auto stopping = std::chrono::steady_clock::now();
  agent.reset();
  CHECK(std::chrono::steady_clock::now() - stopping < std::chrono::seconds(8));
  const auto seen = held.get();
  REQUIRE(seen["closed_after"].is_number());
  CHECK(seen["closed_after"].get<double>() < 8.0);
}

TEST_CASE("stopping the agent during a slow download does not wait for the guest",
          "[guests][integration]") {
  FakeGarm garm(agent_mode_instances());
  auto agent = std::make_unique<GuestHost>(garm);
  agent->service->create(kControllerId, agent->bootstrap("garm-guest-a", kTokenA));
  const auto url = agent->base_url() + "/api/v1/metadata/tools/garm-agent/4f1e/download";
  auto download = std::async(std::launch::async, [&] {
    return run_command("curl -s -m 60 --limit-rate 1M --interface 127.0.0.2 " + bearer(kTokenA) +
                       " -o /dev/null '" + url + "'");
  });
  for (int i = 0; i < 200 && garm_saw(garm, "GET") == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  REQUIRE(garm_saw(garm, "GET") == 1);
  // The relay's pipe fills while the guest reads slowly. Stopping earlier is covered too: a
  // pipe that comes after the stop is abandoned as it comes.
  std::this_thread::sleep_for(std::chrono::milliseconds(500));

  const auto stopping = std::chrono::steady_clock::now();
  agent.reset();
  // Without abandoning its pipe, the download's worker holds the stop for 30 s.
  CHECK(std::chrono::steady_clock::now() - stopping < std::chrono::seconds(10));
  // curl drains what the socket buffers hold (a few MB) at its rate, then sees the body end
  // short, long before its own 60 s.
  CHECK(download.get().exit_code == 18);
}

TEST_CASE("warm guests count against their controller's quota, and binding one takes nothing more",
          "[guests][integration][warm][shares]") {
  FakeGarm garm(two_instances());
  GuestHost agent(garm, true, [](agent::AgentConfig& config) {
    warm_one(config);
    config.shares.quotas.push_back(
        {.controller = kController, .max = {.instances = 2}, .reserved = {}});
  });
  agent::WarmPool pool(*agent.service, agent.host.clock, agent.host.log);
  REQUIRE(pool.pass().started == 1);
  const auto warm = agent.service->warm_guests().front();
  CHECK(agent.service->capacity().usage.of(kController).instances == 1);
  agent.service->create(kControllerId, agent.bootstrap("garm-guest-a", kTokenA));  // cold: 2 of 2
  // A second warm guest would take the controller past its quota: none is started.
  agent.host.config.warm.front().count = 2;
  const auto pass = pool.pass();
  CHECK(pass.started == 0);
  CHECK(pass.failures == 0);  // a full quota is no failure
  // ...nor a refusal of garm's: no pool waits for a warm guest.
  CHECK(agent.service->refusals().of(agent::RefusalReason::quota) == 0);
  try {
    agent.service->create(kControllerId, agent.bootstrap("garm-guest-b", kTokenB));
    FAIL("a cold create went past the quota that a warm guest fills");
  } catch (const agent::ServiceError& e) {
    CHECK_THAT(e.what(), Catch::Contains("is at its quota"));
  }
  CHECK(agent.service->refusals().of(agent::RefusalReason::quota) == 1);
  // The warm guest, once ready, is the controller's own: binding it adds nothing.
  REQUIRE(agent.service->mark_warm_ready(warm.domain_name));
  const auto bound = agent.service->create(kControllerId, agent.bootstrap("garm-guest-b", kTokenB));
  CHECK(bound.provider_id == warm.domain_uuid);
  CHECK(agent.service->capacity().usage.of(kController).instances == 2);
  // Another controller is not held back by this one's quota.
  agent.service->create(kOtherControllerId, agent.bootstrap("garm-other-1", "token-other-1"));
}
