// The hub and an agent's link to it, in one process on loopback: enrolment by token, tunnels
// dialed by the agent and turned around, requests relayed with the caller's identity, more
// tunnels under load, removal, and a hub restart. (The NAT, the real agent and the provider
// are in tests/hub/run_hub_tier.py.)

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <functional>
#include <future>
#include <thread>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "agent/daemon/hub_enrolment.hpp"
#include "agent/daemon/hub_link.hpp"
#include "common/durable_file.hpp"
#include "common/temp_dir.hpp"
#include "common/unix_time.hpp"
#include "hub/hub_server.hpp"
#include "net/admin_client.hpp"
#include "net/https_client.hpp"
#include "net/pki.hpp"
#include "support/hub_fixtures.hpp"
#include "wire/join_token.hpp"
#include "wire/relay_framing.hpp"

using namespace garm_edge;
using nlohmann::json;

using namespace garm_edge::testing;

TEST_CASE("an agent joins a hub, dials its tunnels and answers relayed requests", "[hub]") {
  TempDir dir;
  const auto hub_state = dir.path() / "hub";
  hub::HubStore::init(
      hub_state,
      {.dns_names = {"localhost"}, .ip_addresses = {"127.0.0.1"}, .client_name = "garm"});
  QuietLog log;
  auto running = std::make_unique<RunningHub>(hub_state, 0, log);
  const auto agent_port = running->server->agent_port();
  const auto provider_port = running->server->provider_port();
  hub::HubStore store(hub_state);
  // The operator names the host and the address it is reached by (the impostor below uses it).
  const auto [record, secret] =
      store.create_token(std::chrono::hours(1), 1, {"lab"},
                         {.name = "lab-board-7", .ip_addresses = {"127.0.0.1"}}, unix_now());
  const auto agent_state = dir.path() / "agent";
  const auto token = wire::JoinToken{.hub_url = "https://127.0.0.1:" + std::to_string(agent_port),
                                     .ca_fingerprint = store.ca_fingerprint(),
                                     .id = record.id,
                                     .secret = secret}
                         .encode();
  agent::join_hub({.token = token,
                   .state_dir = agent_state,
                   .name = "lab-board-7",
                   .dns_names = {},
                   .ip_addresses = {"127.0.0.1"}});
  LinkedAgent agent(agent_state, std::chrono::milliseconds(0), log);

  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (tunnels_of(*running->server, "lab-board-7") < 2 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  CHECK(tunnels_of(*running->server, "lab-board-7") == 2);  // the idle ones it keeps

  SECTION("a relayed request reaches the agent with its caller, and its answer comes back") {
    const auto answer =
        call_hub(hub_state / "pki", provider_port, "/v1/agents/lab-board-7/relay/v1/capacity?x=1");
    REQUIRE(answer.status == 200);
    const auto body = json::parse(answer.body);
    CHECK(body["target"] == "/v1/capacity?x=1");
    CHECK(body["caller"] == "garm");
    // The controllers the hub lets garm act for come along (the agent filters warm guests by
    // them).
    CHECK(body["through_hub"] ==
          json::array(
              {"urn:garm-edge:through-hub",
               "urn:garm-edge:through-hub:controllers:9dcf590a-1192-4a9c-b3e4-e0902974c2c0"}));
    const auto listed = json::parse(call_hub(hub_state / "pki", provider_port, "/v1/agents").body);
    CHECK(listed["agents"][0]["name"] == "lab-board-7");
    CHECK(listed["agents"][0]["connected"] == true);
    CHECK(listed["agents"][0]["version"] == "9.9.9");
    CHECK(listed["agents"][0]["labels"] == json::array({"lab"}));
  }

  SECTION("one request to many agents comes back framed, a missing agent said so") {
    net::HttpsClient client({.host = "localhost", .port = provider_port},
                            net::TlsConfig::load(net::TlsConfig::Role::client,
                                                 {.ca = hub_state / "pki/ca.crt",
                                                  .crl = "",
                                                  .certificate = hub_state / "pki/clients/garm.crt",
                                                  .key = hub_state / "pki/clients/garm.key"}),
                            {});
    const auto answer = client.request(
        "POST", "/v1/relay",
        json({{"method", "GET"}, {"target", "/v1/capacity"}, {"agents", {"lab-board-7", "nobody"}}})
            .dump());
    REQUIRE(answer.status == 200);
    const auto parts = wire::parse_relay_framing(answer.body);
    REQUIRE(parts);
    REQUIRE(parts->size() == 2);
    for (const auto& part : *parts) {
      if (part.agent == "lab-board-7") {
        CHECK(part.status == 200);
        CHECK(json::parse(part.body)["caller"] == "garm");
      } else {
        CHECK(part.status == 0);
        CHECK_FALSE(part.sent);
        CHECK_THAT(part.body, Catch::Contains("not connected"));
      }
    }
    const auto everyone = client.request(
        "POST", "/v1/relay",
        json({{"method", "GET"}, {"target", "/v1/capacity"}, {"agents", "*"}}).dump());
    CHECK(wire::parse_relay_framing(everyone.body)->size() == 1);
    const auto forbidden = client.request(
        "POST", "/v1/relay",
        json({{"method", "GET"},
              {"target", "/v1/controllers/00000000-0000-4000-8000-000000000000/instances"},
              {"agents", "*"}})
            .dump());
    CHECK(forbidden.status == 403);
    // A target that would end the request line and start another is no target.
    const auto smuggled =
        client.request("POST", "/v1/relay",
                       json({{"method", "GET"},
                             {"target", "/healthz?x HTTP/1.1\r\nHost: a\r\n\r\nPOST /v1/draining"},
                             {"agents", "*"}})
                           .dump());
    CHECK(smuggled.status == 400);
    CHECK(agent.served == 2);  // the two capacity requests above, nothing else
  }

  SECTION("the hub checks the caller's controllers and relays plain paths only") {
    const auto other = call_hub(hub_state / "pki", provider_port,
                                "/v1/agents/lab-board-7/relay/v1/controllers/"
                                "00000000-0000-4000-8000-000000000000/instances");
    CHECK(other.status == 403);
    const auto encoded = call_hub(hub_state / "pki", provider_port,
                                  "/v1/agents/lab-board-7/relay/v1/%63ontrollers/x");
    CHECK(encoded.status == 400);
    const auto dotted = call_hub(hub_state / "pki", provider_port,
                                 "/v1/agents/lab-board-7/relay/v1/../v1/capacity");
    CHECK(dotted.status == 400);
    CHECK(agent.served == 0);
    const auto draining =
        call_hub(hub_state / "pki", provider_port, "/v1/agents/lab-board-7/relay/v1/warm");
    CHECK(draining.status == 403);  // host-wide beyond capacity: only for controllers = ["*"]
    CHECK(call_hub(hub_state / "pki", provider_port, "/v1/agents/lab-board-7/relay/v1/capacity")
              .status == 200);
    const auto unknown =
        call_hub(hub_state / "pki", provider_port, "/v1/agents/nobody/relay/v1/capacity");
    CHECK(unknown.status == 502);
    CHECK_THAT(unknown.body, Catch::Contains("agent_not_connected"));
  }

  SECTION("an agent's certificate is no client of the hub, and a client's opens no tunnel") {
    const auto as_agent = [&] {
      net::HttpsClient client({.host = "localhost", .port = provider_port},
                              net::TlsConfig::load(net::TlsConfig::Role::client,
                                                   {.ca = agent_state / "hub/ca.crt",
                                                    .crl = "",
                                                    .certificate = agent_state / "hub/agent.pem",
                                                    .key = agent_state / "hub/agent.pem"}),
                              {});
      return client.request("GET", "/v1/agents");
    }();
    CHECK(as_agent.status == 403);
    net::HttpsClient as_client(
        {.host = "127.0.0.1", .port = agent_port},
        net::TlsConfig::load(net::TlsConfig::Role::client,
                             {.ca = hub_state / "pki/ca.crt",
                              .crl = "",
                              .certificate = hub_state / "pki/clients/garm.crt",
                              .key = hub_state / "pki/clients/garm.key"}),
        {});
    CHECK(as_client.request("POST", "/v1/tunnel").status == 403);
  }

  SECTION("a tunnel the agent closes after its answer is not handed out again") {
    CHECK(call_hub(hub_state / "pki", provider_port,
                   "/v1/agents/lab-board-7/relay/v1/controllers/"
                   "9dcf590a-1192-4a9c-b3e4-e0902974c2c0/close")
              .status == 200);
    for (int i = 0; i < 4; ++i) {
      CHECK(call_hub(hub_state / "pki", provider_port, "/v1/agents/lab-board-7/relay/v1/capacity")
                .status == 200);
    }
  }

  SECTION("heartbeats keep the idle tunnels without making the agent dial more") {
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // five heartbeat rounds
    CHECK(tunnels_of(*running->server, "lab-board-7") == 2);
  }

  SECTION("an agent's certificate cannot pass for the hub's") {
    asio::io_context io;
    net::TlsServer impostor(
        io, {},
        net::TlsConfig::load(net::TlsConfig::Role::server,
                             {.ca = hub_state / "pki/ca.crt",
                              .crl = "",
                              .certificate = agent_state / "hub/agent.pem",
                              .key = agent_state / "hub/agent.pem"}),
        [](net::HttpRequest, net::PeerIdentity, net::TlsServer::Respond respond) {
          respond({.status = 200, .content_type = "text/plain", .body = "", .headers = {}});
        });
    impostor.start();
    std::thread serving([&io] { io.run(); });
    net::HttpsClientOptions options;
    options.check_peer = agent::hub_peer(agent_state / "hub");
    net::HttpsClient client({.host = "127.0.0.1", .port = impostor.port()},
                            net::TlsConfig::load(net::TlsConfig::Role::client,
                                                 {.ca = hub_state / "pki/ca.crt",
                                                  .crl = "",
                                                  .certificate = hub_state / "pki/clients/garm.crt",
                                                  .key = hub_state / "pki/clients/garm.key"}),
                            options);
    CHECK_THROWS_WITH(client.request("GET", "/v1/agents"),
                      Catch::Contains("host \"lab-board-7\", not the hub's"));
    impostor.stop();
    io.stop();
    serving.join();
  }

  SECTION("requests beyond the idle tunnels make the agent dial more; all are answered") {
    std::vector<std::thread> callers;
    std::atomic<int> answered{0};
    for (int i = 0; i < 12; ++i) {
      callers.emplace_back([&] {
        if (call_hub(hub_state / "pki", provider_port, "/v1/agents/lab-board-7/relay/v1/capacity")
                .status == 200) {
          ++answered;
        }
      });
    }
    for (auto& caller : callers) {
      caller.join();
    }
    CHECK(answered == 12);
    CHECK(tunnels_of(*running->server, "lab-board-7") >= 2);
    CHECK(tunnels_of(*running->server, "lab-board-7") <= 8);
  }

  SECTION("a removed agent loses its tunnels within a second and cannot dial again") {
    const auto removed_at = std::chrono::steady_clock::now();
    REQUIRE(store.remove("lab-board-7", unix_now()));
    while (tunnels_of(*running->server, "lab-board-7") > 0 &&
           std::chrono::steady_clock::now() - removed_at < std::chrono::seconds(3)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    INFO(log.text());
    CHECK(std::chrono::steady_clock::now() - removed_at < std::chrono::seconds(1));
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    CHECK(tunnels_of(*running->server, "lab-board-7") == 0);
    CHECK_THAT(agent.link->status().last_error, Catch::Contains("refused a tunnel"));
  }

  SECTION("after a hub restart the agent is back in well under five seconds") {
    running.reset();
    running = std::make_unique<RunningHub>(hub_state, agent_port, log);
    const auto restarted = std::chrono::steady_clock::now();
    while (tunnels_of(*running->server, "lab-board-7") == 0 &&
           std::chrono::steady_clock::now() - restarted < std::chrono::seconds(10)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    CHECK(std::chrono::steady_clock::now() - restarted < std::chrono::seconds(5));
    CHECK(call_hub(hub_state / "pki", running->server->provider_port(),
                   "/v1/agents/lab-board-7/relay/v1/capacity")
              .status == 200);
  }
}

namespace {

/// A hub whose agent lab-board-7 (joined with a token for that name) answers after `delay`.
struct HubWithAgent {
  HubWithAgent(std::chrono::milliseconds delay,
               const std::function<void(hub::HubConfig&)>& adjust = {}) {
    hub::HubStore::init(
        state, {.dns_names = {"localhost"}, .ip_addresses = {"127.0.0.1"}, .client_name = "garm"});
    running = std::make_unique<RunningHub>(state, 0, log, adjust);
    hub::HubStore store(state);
    const auto [record, secret] =
        store.create_token(std::chrono::hours(1), 1, {}, {.name = "lab-board-7"}, unix_now());
    agent::join_hub(
        {.token = wire::JoinToken{.hub_url = "https://127.0.0.1:" +
                                             std::to_string(running->server->agent_port()),
                                  .ca_fingerprint = store.ca_fingerprint(),
                                  .id = record.id,
                                  .secret = secret}
                      .encode(),
         .state_dir = dir.path() / "agent",
         .name = "lab-board-7"});
    agent = std::make_unique<LinkedAgent>(dir.path() / "agent", delay, log);
    // Generous: under qemu-user (the cross tiers) every handshake is slow.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (tunnels_of(*running->server, "lab-board-7") < 2 &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    REQUIRE(tunnels_of(*running->server, "lab-board-7") >= 2);
  }
  /// The handshake gets 60 s, not 5: under qemu-user a burst of 41 handshakes at once takes
  /// longer than that, and these tests are about order, not time.
  net::HttpsResponse call(const std::string& path, const std::string& client = "clients/garm") {
    net::HttpsClientOptions patient;
    patient.connect_timeout = std::chrono::seconds(60);
    return call_hub(state / "pki", running->server->provider_port(), path, client, patient);
  }
  std::size_t waiting() {
    const auto presence = running->server->tunnels().presence("lab-board-7");
    return presence ? presence->waiting : 0;
  }

  TempDir dir;
  std::filesystem::path state = dir.path() / "hub";
  QuietLog log;
  std::unique_ptr<RunningHub> running;
  std::unique_ptr<LinkedAgent> agent;
};

}  // namespace

TEST_CASE("clients take turns for a busy agent's tunnels, each with its own cap", "[hub][relay]") {
  HubWithAgent fleet(std::chrono::milliseconds(0), [](hub::HubConfig& config) {
    config.clients.push_back({.identity = "tenant", .controllers = {"*"}});
    config.tunnels.max_waiting_per_client = 24;
  });
  hub::HubStore(fleet.state).issue_client("tenant");
  const std::string capacity = "/v1/agents/lab-board-7/relay/v1/capacity";
  // The agent holds every request until the queue is built: garm's burst fills its tunnels and
  // its share of the queue, then the tenant's one request waits behind it.
  fleet.agent->close_gate();
  std::vector<std::future<net::HttpsResponse>> burst;
  for (int i = 0; i < 40; ++i) {
    burst.push_back(std::async(std::launch::async, [&] { return fleet.call(capacity); }));
  }
  // The queue settles once every tunnel the agent may open (8) is taken and nothing moves any
  // more. Under qemu-user the agent dials its last tunnels slowly: a request that finds a new
  // tunnel does not wait, so the count of tunnels is part of the settling.
  const auto all_tunnels_open = [&] {
    return tunnels_of(*fleet.running->server, "lab-board-7") >= 8;
  };
  const auto settled = [&](std::size_t at_least) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    auto last = fleet.waiting();
    auto since = std::chrono::steady_clock::now();
    while (std::chrono::steady_clock::now() < deadline &&
           (last < at_least || !all_tunnels_open() ||
            std::chrono::steady_clock::now() - since < std::chrono::milliseconds(500))) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      if (const auto now_waiting = fleet.waiting(); now_waiting != last) {
        last = now_waiting;
        since = std::chrono::steady_clock::now();
      }
    }
    return last;
  };
  // 40 > 8 tunnels + 24: at garm's cap every later garm request is refused at once, so the one
  // more that waits below can only be the tenant's (not a garm request late from its handshake,
  // as under qemu-user on a busy host).
  const auto garm_waiting = settled(24);
  REQUIRE(garm_waiting == 24);  // garm's cap
  auto tenant_call =
      std::async(std::launch::async, [&] { return fleet.call(capacity, "clients/tenant"); });
  REQUIRE(settled(garm_waiting + 1) == garm_waiting + 1);
  fleet.agent->open_gate();
  CHECK(tenant_call.get().status == 200);
  int answered = 0;
  int refused = 0;
  for (auto& call : burst) {
    const auto answer = call.get();
    answer.status == 200 ? ++answered : ++refused;
    if (answer.status != 200) {
      CHECK_THAT(answer.body, Catch::Contains("too many requests waiting"));
    }
  }
  CHECK(refused > 0);  // beyond garm's 24 waiting, at once
  CHECK(answered + refused == 40);
  std::lock_guard guard(fleet.agent->handlers_mutex);
  const auto& order = fleet.agent->callers;
  const auto tenant = std::find(order.begin(), order.end(), "tenant") - order.begin();
  INFO("the tenant's request reached the agent as number " << tenant + 1 << " of " << order.size());
  // Its turn came at the next free tunnel, not after garm's waiting burst.
  CHECK(tenant < static_cast<std::ptrdiff_t>(order.size()) - 10);
}

TEST_CASE("a relay names each agent once, however often it is asked to", "[hub][relay]") {
  HubWithAgent fleet(std::chrono::milliseconds(0));
  net::HttpsClient client({.host = "localhost", .port = fleet.running->server->provider_port()},
                          net::TlsConfig::load(net::TlsConfig::Role::client,
                                               {.ca = fleet.state / "pki/ca.crt",
                                                .crl = "",
                                                .certificate = fleet.state / "pki/clients/garm.crt",
                                                .key = fleet.state / "pki/clients/garm.key"}),
                          {});
  const auto answer =
      client.request("POST", "/v1/relay",
                     json({{"method", "GET"},
                           {"target", "/v1/capacity"},
                           {"agents", std::vector<std::string>(1000, "lab-board-7")}})
                         .dump());
  REQUIRE(answer.status == 200);
  CHECK(wire::parse_relay_framing(answer.body)->size() == 1);
  CHECK(fleet.agent->served == 1);
  // One body copied for thousands of agents is refused before anything is sent.
  std::vector<std::string> many;
  for (int i = 0; i < 4096; ++i) {
    many.push_back("agent-" + std::to_string(i));
  }
  const auto fanned = client.request("POST", "/v1/relay",
                                     json({{"method", "POST"},
                                           {"target", "/v1/capacity"},
                                           {"body", std::string(8192, 'x')},
                                           {"agents", many}})
                                         .dump());
  CHECK(fanned.status == 400);
  CHECK(fleet.agent->served == 1);
}

TEST_CASE("one scrape of the hub: every agent's series under its name, a silent one down",
          "[hub][metrics]") {
  HubWithAgent fleet(std::chrono::milliseconds(0), [](hub::HubConfig& config) {
    config.metrics.agent_timeout = std::chrono::milliseconds(700);
  });
  hub::HubStore store(fleet.state);
  store.issue_client("prometheus", wire::Role::metrics);
  // Enrolled, never connected.
  const auto [record, secret] =
      store.create_token(std::chrono::hours(1), 1, {}, {.name = "lab-board-8"}, unix_now());
  agent::join_hub(
      {.token = wire::JoinToken{.hub_url = "https://127.0.0.1:" +
                                           std::to_string(fleet.running->server->agent_port()),
                                .ca_fingerprint = store.ca_fingerprint(),
                                .id = record.id,
                                .secret = secret}
                    .encode(),
       .state_dir = fleet.dir.path() / "agent-8",
       .name = "lab-board-8"});

  const auto scrape = fleet.call("/metrics", "clients/prometheus");
  REQUIRE(scrape.status == 200);
  const auto& text = scrape.body;
  CHECK_THAT(text, Catch::Contains("garm_edge_agent_up{agent=\"lab-board-7\"} 1\n") &&
                       Catch::Contains("garm_edge_agent_up{agent=\"lab-board-8\"} 0\n") &&
                       Catch::Contains("garm_edge_hub_agent_tunnels{agent=\"lab-board-7\"} "));
  // The agent was asked as the metrics reader, and nothing of it passes for the hub's series.
  CHECK_THAT(text, Catch::Contains("garm_edge_test_scrapes_total{agent=\"lab-board-7\","
                                   "caller=\"prometheus\",role=\"urn:garm-edge:metrics:"
                                   "prometheus\"} 1\n"));
  CHECK(text.find("# TYPE garm_edge_agent_up gauge") == text.rfind("# TYPE garm_edge_agent_up"));
  CHECK(text.find("garm_edge_agent_up{agent=\"lab-board-7\"} 1") ==
        text.rfind("garm_edge_agent_up{agent=\"lab-board-7\""));
  // The agent's own view of its link stays; what it may not write is dropped, and counted.
  CHECK_THAT(text,
             Catch::Contains("garm_edge_hub_link_enrolled{agent=\"lab-board-7\"} 1\n") &&
                 Catch::Contains("garm_edge_hub_agent_dropped_lines{agent=\"lab-board-7\"} 2\n"));
  CHECK_THAT(text, Catch::Contains("garm_edge_hub_certificate_expiry_timestamp_seconds{"
                                   "certificate=\"client\",name=\"prometheus\"}"));

  SECTION("an agent that does not answer in time is down, and the scrape still answers") {
    fleet.agent->close_gate();
    const auto started = std::chrono::steady_clock::now();
    const auto slow = fleet.call("/metrics", "clients/prometheus");
    CHECK(std::chrono::steady_clock::now() - started < std::chrono::seconds(5));
    REQUIRE(slow.status == 200);
    CHECK_THAT(slow.body, Catch::Contains("garm_edge_agent_up{agent=\"lab-board-7\"} 0\n"));
    CHECK(slow.body.find("garm_edge_test_scrapes_total") == std::string::npos);
    fleet.agent->open_gate();
  }
  SECTION("only a metrics reader scrapes, and a metrics reader does nothing else") {
    CHECK(fleet.call("/metrics").status == 403);  // garm's client
    CHECK(fleet.call("/v1/agents", "clients/prometheus").status == 403);
    CHECK(fleet.call("/v1/agents/lab-board-7/relay/v1/capacity", "clients/prometheus").status ==
          403);
    // Nothing else at all, as docs/observability.md says.
    CHECK(fleet.call("/healthz", "clients/prometheus").status == 403);
    CHECK(fleet.call("/v1/crl", "clients/prometheus").status == 403);
    CHECK(fleet.call("/healthz").status == 200);
  }
}

TEST_CASE("a hub certificate revoked at the hub commands no agent", "[hub][roles][crl]") {
  TempDir dir;
  const auto hub_state = dir.path() / "hub";
  hub::HubStore::init(
      hub_state,
      {.dns_names = {"localhost"}, .ip_addresses = {"127.0.0.1"}, .client_name = "garm"});
  // A hub made before roles: its certificate claims none. Whoever kept its key tries to be
  // the hub once the real one has reissued its certificate (and revoked that one).
  net::pki_reissue_server(hub_state / "pki", "hub", "garm-edge-hub", {"localhost"}, {"127.0.0.1"},
                          {});
  std::filesystem::copy_file(hub_state / "pki/hub.crt", dir.path() / "old-hub.crt");
  std::filesystem::copy_file(hub_state / "pki/hub.key", dir.path() / "old-hub.key");
  QuietLog log;
  RunningHub running(hub_state, 0, log);
  hub::HubStore store(hub_state);
  const auto [record, secret] =
      store.create_token(std::chrono::hours(1), 1, {}, {.name = "lab-board-9"}, unix_now());
  const auto agent_state = dir.path() / "agent";
  agent::join_hub({.token = wire::JoinToken{.hub_url = "https://127.0.0.1:" +
                                                       std::to_string(running.server->agent_port()),
                                            .ca_fingerprint = store.ca_fingerprint(),
                                            .id = record.id,
                                            .secret = secret}
                                .encode(),
                   .state_dir = agent_state,
                   .name = "lab-board-9"});
  const auto enrolment = *agent::load_hub_enrolment(agent_state);
  const auto crl = agent::fetch_hub_crl(enrolment, std::chrono::seconds(5));
  REQUIRE(crl);
  write_atomically(enrolment.crl(), *crl, 0644);

  asio::io_context io;
  net::TlsServer impostor(
      io, {},
      net::TlsConfig::load(net::TlsConfig::Role::server, {.ca = hub_state / "pki/ca.crt",
                                                          .crl = "",
                                                          .certificate = dir.path() / "old-hub.crt",
                                                          .key = dir.path() / "old-hub.key"}),
      [](net::HttpRequest, net::PeerIdentity, net::TlsServer::Respond respond) {
        respond({.status = 200, .content_type = "text/plain", .body = "", .headers = {}});
      });
  impostor.start();
  std::thread serving([&io] { io.run(); });
  const auto ask_impostor = [&] {
    net::HttpsClientOptions options;
    options.check_peer = agent::hub_peer(enrolment.directory);
    return net::HttpsClient({.host = "127.0.0.1", .port = impostor.port()}, enrolment.client_tls(),
                            options)
        .request("GET", "/v1/tunnel");
  };
  SECTION("the CRL the agent fetched names it") {
    CHECK_THROWS(ask_impostor());
  }
  SECTION("without a CRL, the hub's role shown at the join is remembered") {
    std::filesystem::remove(enrolment.crl());
    CHECK_THROWS_WITH(ask_impostor(), Catch::Contains("claims no role"));
  }
  SECTION("the real hub still is the hub") {
    CHECK(agent::fetch_hub_crl(enrolment, std::chrono::seconds(5)));
  }
  impostor.stop();
  serving.join();
}

TEST_CASE("a hub on files runs the CLI's record commands itself, on its admin socket",
          "[hub][admin]") {
  TempDir dir;
  const auto hub_state = dir.path() / "hub";
  hub::HubStore::init(hub_state, {.dns_names = {"localhost"}, .ip_addresses = {}});
  const auto ask = [&](std::vector<std::string> arguments) {
    return net::ask_running_daemon(
        hub_state,
        {.command = "records", .action = {}, .name = {}, .arguments = std::move(arguments)}, {},
        std::chrono::seconds(10), "hub");
  };
  QuietLog log;
  {
    RunningHub running(hub_state, 0, log);
    const auto created = ask({"token", "create", "--uses", "3", "--config", "hub.toml"});
    REQUIRE(created);
    CHECK(created->exit_code == 0);
    CHECK(wire::JoinToken::decode(created->output));
    CHECK_THAT(created->error, Catch::Contains("3 use(s)"));
    const auto listed = ask({"token", "list", "--config", "hub.toml"});
    REQUIRE(listed);
    CHECK_THAT(listed->output, Catch::Contains("3          3600 s"));
    // Refusals come back as the CLI prints them, with its exit codes; nothing changes.
    const auto bad = ask({"token", "create", "--uses", "0", "--config", "hub.toml"});
    REQUIRE(bad);
    CHECK(bad->exit_code == 2);
    CHECK_THAT(bad->error, Catch::Contains("--uses 1-10000"));
    const auto unknown = ask({"remove", "nobody", "--config", "hub.toml"});
    REQUIRE(unknown);
    CHECK(unknown->exit_code == 1);
    CHECK_THAT(unknown->error, Catch::Contains("no agent nobody"));
    const auto other = net::ask_running_daemon(
        hub_state, {.command = "serve", .action = {}, .name = {}, .arguments = {"serve"}}, {},
        std::chrono::seconds(10), "hub");
    REQUIRE(other);
    CHECK(other->exit_code == 2);
    CHECK(hub::HubStore(hub_state).tokens().size() == 1);
    // A second hub started on this state directory would take its admin socket: refused.
    QuietLog second_log;
    CHECK_THROWS_WITH(RunningHub(hub_state, 0, second_log),
                      Catch::Contains("is served by another garm-edge-hub process"));
    CHECK(ask({"token", "list", "--config", "hub.toml"}));
  }
  {
    RunningHub again(hub_state, 0, log);  // the lock went with the hub
    CHECK(ask({"token", "list", "--config", "hub.toml"}));
  }
  // No hub runs: nothing answers, and the CLI works on the files itself.
  CHECK_FALSE(ask({"token", "list", "--config", "hub.toml"}));
  CHECK_FALSE(std::filesystem::exists(net::admin_socket_path(hub_state)));
}
