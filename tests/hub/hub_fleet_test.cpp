// Several hubs on one PostgreSQL database, in one process on loopback: an agent learns every
// hub from the one it joined and keeps tunnels to each; a hub stopping leaves the others'
// tunnels and relays as they were. (Real processes and kill -9: tests/hub/run_hub_tier.py.)

#include <filesystem>
#include <fstream>
#include <thread>

#include <asio.hpp>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "agent/daemon/hub_enrolment.hpp"
#include "common/durable_file.hpp"
#include "common/temp_dir.hpp"
#include "common/unix_time.hpp"
#include "hub/postgres_state.hpp"
#include "provider/fleet.hpp"
#include "provider/hubs.hpp"
#include "support/api_server.hpp"
#include "support/black_hole.hpp"
#include "support/hub_fixtures.hpp"
#include "support/temp_postgres.hpp"
#include "support/test_support.hpp"
#include "wire/join_token.hpp"

using namespace garm_edge;
using namespace garm_edge::testing;

namespace {

/// A port nothing listens on now, for a hub whose URL must name its port before it starts.
std::uint16_t unused_port() {
  asio::io_context io;
  asio::ip::tcp::acceptor acceptor(io, {asio::ip::make_address("127.0.0.1"), 0});
  return acceptor.local_endpoint().port();
}

std::string hub_url(std::uint16_t port) {
  return "https://127.0.0.1:" + std::to_string(port);
}

bool eventually(const std::function<bool()>& condition,
                std::chrono::milliseconds within = std::chrono::seconds(10)) {
  const auto deadline = std::chrono::steady_clock::now() + within;
  while (!condition()) {
    if (std::chrono::steady_clock::now() > deadline) {
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

/// One hub of the fleet: its own state directory with the fleet's PKI, the shared database.
std::unique_ptr<RunningHub> start_hub(const std::filesystem::path& state, std::uint16_t port,
                                      const net::PostgresTarget& database, QuietLog& log) {
  return std::make_unique<RunningHub>(state, port, log, [&](hub::HubConfig& config) {
    config.url = hub_url(port);
    config.database = database;
  });
}

/// Two hubs on one database (B with a copy of A's pki/, as the operator makes it) and one agent
/// joined at A.
struct TwoHubFleet {
  TwoHubFleet() {
    hub::HubStore::init(
        state_a,
        {.dns_names = {"localhost"}, .ip_addresses = {"127.0.0.1"}, .client_name = "garm"});
    std::filesystem::create_directories(state_b);
    std::filesystem::copy(state_a / "pki", state_b / "pki",
                          std::filesystem::copy_options::recursive);
    hub_a = start_hub(state_a, port_a, database, log);
    hub_b = start_hub(state_b, port_b, database, log);
    hub::HubStore store(state_a, {}, hub::open_postgres_state(database));
    const auto [record, secret] =
        store.create_token(std::chrono::hours(1), 1, {}, {.name = "rack1-a"}, unix_now());
    agent::join_hub({.token = wire::JoinToken{.hub_url = hub_url(port_a),
                                              .ca_fingerprint = store.ca_fingerprint(),
                                              .id = record.id,
                                              .secret = secret}
                                  .encode(),
                     .state_dir = agent_state,
                     .name = "rack1-a"});
    agent = std::make_unique<LinkedAgent>(agent_state, std::chrono::milliseconds(0), log,
                                          std::chrono::milliseconds(200));
  }
  bool both_connected() {
    return eventually([&] {
      return tunnels_of(*hub_a->server, "rack1-a") >= 2 &&
             tunnels_of(*hub_b->server, "rack1-a") >= 2;
    });
  }
  /// A provider's [[hubs]] entry naming both hubs' provider listeners, A first.
  provider::ProviderConfig provider_config() const {
    provider::ProviderConfig config;
    config.hubs = {{.name = "lab",
                    .urls = {"https://localhost:" + std::to_string(hub_a->server->provider_port()),
                             "https://localhost:" + std::to_string(hub_b->server->provider_port())},
                    .ca = state_a / "pki/ca.crt",
                    .certificate = state_a / "pki/clients/garm.crt",
                    .key = state_a / "pki/clients/garm.key"}};
    return config;
  }

  TempPostgres postgres;
  net::PostgresTarget database = net::parse_postgres_url(postgres.socket_url());
  TempDir dir;
  std::filesystem::path state_a = dir.path() / "hub-a";
  std::filesystem::path state_b = dir.path() / "hub-b";
  std::filesystem::path agent_state = dir.path() / "agent";
  QuietLog log;
  std::uint16_t port_a = unused_port();
  std::uint16_t port_b = unused_port();
  std::unique_ptr<RunningHub> hub_a;
  std::unique_ptr<RunningHub> hub_b;
  std::unique_ptr<LinkedAgent> agent;  // last: stopped before the hubs
};

}  // namespace

TEST_CASE("an agent keeps tunnels to every hub of the fleet, and one hub stopping leaves the rest",
          "[hub][fleet]") {
  REQUIRE(TempPostgres::available());
  TwoHubFleet fleet;
  auto& hub_a = fleet.hub_a;
  auto& hub_b = fleet.hub_b;
  auto& agent = *fleet.agent;
  const auto& state_a = fleet.state_a;
  const auto& state_b = fleet.state_b;
  const auto port_a = fleet.port_a;
  const auto port_b = fleet.port_b;
  const auto& agent_state = fleet.agent_state;

  // Hub A names hub B (from the enrolment, or the list asked for after it): tunnels to both.
  CHECK(fleet.both_connected());
  const auto enrolment = agent::load_hub_enrolment(agent_state);
  REQUIRE(enrolment);
  CHECK(enrolment->hub_urls() == std::vector<std::string>{hub_url(port_a), hub_url(port_b)});
  const auto status = agent.link->status();
  CHECK(status.hubs_known == 2);
  CHECK(status.hubs_connected == 2);

  // Both hubs list the agent, read from the one database, and relay to it.
  for (const auto* hub : {hub_a.get(), hub_b.get()}) {
    const auto listed = call_hub(state_a / "pki", hub->server->provider_port(), "/v1/agents");
    REQUIRE(listed.status == 200);
    CHECK(nlohmann::json::parse(listed.body)["agents"].size() == 1);
    const auto relayed = call_hub(state_a / "pki", hub->server->provider_port(),
                                  "/v1/agents/rack1-a/relay/v1/capacity");
    CHECK(relayed.status == 200);
  }

  // Hub A gone: its tunnels end, hub B's stay and carry requests; the agent says which is down.
  hub_a.reset();
  CHECK(eventually([&] { return agent.link->status().hubs_connected == 1; }));
  CHECK(tunnels_of(*hub_b->server, "rack1-a") >= 2);
  CHECK(call_hub(state_b / "pki", hub_b->server->provider_port(),
                 "/v1/agents/rack1-a/relay/v1/capacity")
            .status == 200);
  CHECK_THAT(agent.link->status().last_error, Catch::Contains(hub_url(port_a)));

  // Hub A back on its address: the agent dials it again by itself.
  hub_a = start_hub(state_a, port_a, fleet.database, fleet.log);
  CHECK(eventually([&] { return tunnels_of(*hub_a->server, "rack1-a") == 2; }));
  CHECK(agent.link->status().hubs_connected == 2);

  // Removed at hub B: hub A closes its tunnels too (the shared records), and neither takes
  // new ones.
  hub::HubStore store_b(state_b, {}, hub::open_postgres_state(fleet.database));
  CHECK(store_b.remove("rack1-a", unix_now()));
  CHECK(eventually(
      [&] {
        return tunnels_of(*hub_a->server, "rack1-a") == 0 &&
               tunnels_of(*hub_b->server, "rack1-a") == 0;
      },
      std::chrono::seconds(3)));
}

TEST_CASE("a hub's list of hubs is taken only as https URLs, at most kMaxHubs, the joined first",
          "[hub][fleet]") {
  using agent::parse_hub_urls;
  CHECK(parse_hub_urls(R"({"hubs": ["https://hub-a:8444", "https://hub-b:8444"]})") ==
        std::vector<std::string>{"https://hub-a:8444", "https://hub-b:8444"});
  CHECK_FALSE(parse_hub_urls(R"({"hubs": []})"));
  CHECK_FALSE(parse_hub_urls(R"({"hubs": ["http://hub-a:8444"]})"));
  CHECK_FALSE(parse_hub_urls(R"({"hubs": ["https://hub-a:8444", 7]})"));
  CHECK_FALSE(parse_hub_urls(R"({"hubs": "https://hub-a:8444"})"));
  CHECK_FALSE(parse_hub_urls("not json"));
  // Nothing that could end a header line or hide in a log: a name or an address only.
  CHECK_FALSE(parse_hub_urls(nlohmann::json({{"hubs", {"https://a\r\nX-Evil: 1:8444"}}}).dump()));
  CHECK_FALSE(
      parse_hub_urls(nlohmann::json({{"hubs", {std::string("https://a\0b:8444", 16)}}}).dump()));
  CHECK_FALSE(parse_hub_urls(R"({"hubs": ["https://a b:8444"]})"));
  CHECK_FALSE(parse_hub_urls(R"({"hubs": ["https://)" + std::string(2000, 'a') + R"("]})"));
  // A hub listing a thousand hubs (or one many times) costs the agent kMaxHubs dialers at most.
  nlohmann::json many = {{"hubs", nlohmann::json::array()}};
  for (int i = 0; i < 1000; ++i) {
    many["hubs"].push_back("https://hub-" + std::to_string(i % 500) + ":8444");
  }
  CHECK(parse_hub_urls(many.dump())->size() == agent::kMaxHubs);

  TempDir dir;
  const agent::HubEnrolment enrolment{
      .directory = dir.path(), .hub_url = "https://joined:8444", .name = "rack1-a", .labels = {}};
  CHECK(enrolment.hub_urls() == std::vector<std::string>{"https://joined:8444"});
  agent::save_hub_urls(enrolment, {"https://hub-b:8444", "https://joined:8444"});
  CHECK(enrolment.hub_urls() ==
        std::vector<std::string>{"https://joined:8444", "https://hub-b:8444"});
  write_atomically(enrolment.hubs_file(), "{torn");
  CHECK(enrolment.hub_urls() == std::vector<std::string>{"https://joined:8444"});
}

TEST_CASE(
    "the provider counts an agent two hubs reach once, and reaches it through the other "
    "when the first is gone",
    "[hub][fleet][provider]") {
  REQUIRE(TempPostgres::available());
  TwoHubFleet fleet;
  REQUIRE(fleet.both_connected());
  provider::TlsConfigCache tls;
  const auto provider_config = fleet.provider_config();  // before either hub goes
  const auto list = [&] {
    return provider::with_hub_agents(provider_config, tls,
                                     std::chrono::steady_clock::now() + std::chrono::seconds(3));
  };
  const auto hub_a_url = provider_config.hubs[0].urls[0];
  const auto hub_b_url = provider_config.hubs[0].urls[1];

  auto config = list();
  REQUIRE(config.agents.size() == 1);  // once, through whichever hub listed it connected first
  CHECK(config.agents[0].via_hub->connected);
  // The prefetch (ListInstances' one round trip): one answer, from the hub it is reached through.
  std::vector<wire::RelayedAnswer> answers;
  const auto prefetched = provider::with_hub_agents(
      provider_config, tls, std::chrono::steady_clock::now() + std::chrono::seconds(3),
      provider::HubPrefetch{.method = "GET",
                            .path = "/v1/capacity",
                            .timeout = std::chrono::seconds(2),
                            .answers = &answers});
  CHECK(prefetched.agents.size() == 1);
  REQUIRE(answers.size() == 1);
  CHECK(answers[0].status == 200);

  // Each listing names the other hub as the agent's second way in.
  auto through_a = config.agents[0];
  CHECK(through_a.other_hub_urls.size() == 1);
  through_a.url = hub_a_url;
  through_a.other_hub_urls = {hub_b_url};

  // Hub A gone: the same agent, once, through hub B; a call through it is answered.
  fleet.hub_a.reset();
  // A listing made before hub A died still reaches the agent: hub A refuses the connection
  // before anything is sent, and the call goes to hub B.
  provider::AgentClient before_death(through_a, config, tls);
  CHECK(before_death.call("GET", "/v1/capacity", "", provider::CallKind::probe).status == 200);
  const auto started = std::chrono::steady_clock::now();
  config = list();
  const auto listed_in = std::chrono::steady_clock::now() - started;
  REQUIRE(config.agents.size() == 1);
  CHECK(config.agents[0].url == hub_b_url);
  CHECK(listed_in < std::chrono::seconds(3));  // no wait for the dead hub's deadline
  provider::AgentClient client(config.agents[0], config, tls);
  CHECK(client.call("GET", "/v1/capacity", "", provider::CallKind::probe).status == 200);

  // Neither hub answering: an error naming both, never an empty fleet.
  fleet.hub_b.reset();
  CHECK_THROWS_AS(list(), provider::HubError);
  CHECK_THROWS_WITH(list(), Catch::Contains(hub_a_url) && Catch::Contains(hub_b_url));
}

TEST_CASE("an agent asks the hubs it holds tunnels to first: a silent joined hub costs no wait",
          "[hub][fleet]") {
  REQUIRE(TempPostgres::available());
  TwoHubFleet fleet;
  REQUIRE(fleet.both_connected());
  const auto enrolment = *agent::load_hub_enrolment(fleet.agent_state);
  const auto hub_b = hub_url(fleet.port_b);
  REQUIRE(enrolment.hub_urls() == std::vector<std::string>{hub_url(fleet.port_a), hub_b});
  CHECK(agent::hubs_in_asking_order(enrolment.hub_urls(), {hub_b, "https://elsewhere:1"}) ==
        std::vector<std::string>{hub_b, hub_url(fleet.port_a)});
  // Hub A, the one joined and first in the list, goes silent where it answered.
  fleet.hub_a.reset();
  const BlackHole silent_a(fleet.port_a);
  const auto timed = [&](const std::vector<std::string>& reachable_first) {
    const auto started = std::chrono::steady_clock::now();
    CHECK(agent::fetch_hub_crl(enrolment, std::chrono::seconds(2), reachable_first));
    return std::chrono::steady_clock::now() - started;
  };
  // In the list's order, each fetch waits out the silent hub's timeout before asking B.
  CHECK(timed({}) >= std::chrono::seconds(2));
  // The agent's link asks the hubs it holds tunnels to first: B answers at once.
  CHECK(timed({hub_b}) < std::chrono::seconds(2));
}

TEST_CASE(
    "garm's provider process reaches the agent through the hub that answers while another "
    "hub's machine is silent, and ends at once",
    "[hub][fleet][provider]") {
  REQUIRE(TempPostgres::available());
  TwoHubFleet fleet;
  REQUIRE(fleet.both_connected());
  const BlackHole silent_hub;  // accepts, never answers: a machine that died without a reset
  const auto hub = fleet.provider_config().hubs[0];
  const auto config = fleet.dir.path() / "provider.toml";
  std::ofstream(config) << "session_dir = \"" << (fleet.dir.path() / "sessions").string()
                        << "\"\n[timeouts]\nprobe_seconds = 10\nrequest_seconds = 20\n"
                        << "[[hubs]]\nname = \"lab\"\nurls = [\"https://localhost:"
                        << silent_hub.port() << "\", \"" << hub.urls[0] << "\"]\nca = \""
                        << hub.ca.string() << "\"\ncertificate = \"" << hub.certificate.string()
                        << "\"\nkey = \"" << hub.key.string() << "\"\n";
  const auto started = std::chrono::steady_clock::now();
  const auto listed = run_like_garm(kProvider, {{"GARM_COMMAND", "ListInstances"},
                                                {"GARM_CONTROLLER_ID", kController},
                                                {"GARM_POOL_ID", kPool},
                                                {"GARM_PROVIDER_CONFIG_FILE", config.string()},
                                                {"GARM_INTERFACE_VERSION", "v0.1.0"}});
  const auto took = std::chrono::steady_clock::now() - started;
  // The fixture's agent echoes what it is asked, which is no instance list: the provider's own
  // refusal of it shows the list was asked of rack1-a, through hub A.
  CHECK(listed.exit_code == 1);
  CHECK_THAT(listed.err, Catch::Contains("agent rack1-a answered an unusable list"));
  // The silent hub's listing thread waits out the 10 s probe deadline; the process does not
  // wait for it, and ends cleanly with it still running.
  CHECK(took < std::chrono::seconds(5));
}
