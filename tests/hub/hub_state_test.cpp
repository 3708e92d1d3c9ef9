// The hub's records behind HubState: the same checks on the files and on PostgreSQL (a
// temporary cluster of Debian's binaries), then what only a shared database gives: hubs that
// enrol from one token exactly once between them, a versioned schema, a restarted database.

#include "hub/hub_state.hpp"

#include <algorithm>
#include <atomic>
#include <thread>

#include <catch2/catch.hpp>

#include "common/temp_dir.hpp"
#include "hub/hub_records.hpp"
#include "hub/hub_store.hpp"
#include "hub/postgres_state.hpp"
#include "hub/state_migration.hpp"
#include "net/pki.hpp"
#include "support/temp_postgres.hpp"

using namespace garm_edge;

namespace {

const hub::UnixSeconds kStateNow = std::chrono::duration_cast<std::chrono::seconds>(
                                       std::chrono::system_clock::now().time_since_epoch())
                                       .count();

/// A hub's state directory: its PKI made by init, or copied from another hub's (as the
/// operator copies pki/ to a second hub).
std::filesystem::path hub_state_directory(const TempDir& dir, const std::string& name,
                                          const std::filesystem::path* copy_pki_of = nullptr) {
  const auto state = dir.path() / name;
  if (copy_pki_of != nullptr) {
    std::filesystem::create_directories(state);
    std::filesystem::copy(*copy_pki_of / "pki", state / "pki",
                          std::filesystem::copy_options::recursive);
  } else {
    hub::HubStore::init(state,
                        {.dns_names = {"hub.lab"}, .ip_addresses = {}, .client_name = "garm"});
  }
  return state;
}

hub::EnrolmentRequest enrolment_request(const std::string& token_id, const std::string& secret,
                                        const std::string& name) {
  return {.token_id = token_id,
          .secret = secret,
          .name = name,
          .request_pem = net::pki_make_request(name).request_pem,
          .dns_names = {},
          .ip_addresses = {}};
}

std::string state_refusal_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const hub::Refused& e) {
    return e.what();
  }
  return "not refused";
}

/// Two hubs on one temporary database, the second with a copy of the first one's PKI.
struct TwoHubsOnOneDatabase {
  testing::TempPostgres postgres;
  net::PostgresTarget target = net::parse_postgres_url(postgres.socket_url());
  TempDir dir{"hub-state"};
  std::filesystem::path first_dir = hub_state_directory(dir, "hub-a");
  hub::HubStore hub_a{first_dir, {}, hub::open_postgres_state(target)};
  hub::HubStore hub_b{
      hub_state_directory(dir, "hub-b", &first_dir), {}, hub::open_postgres_state(target)};
};

/// What every back end must do alike, through the hub's own HubStore.
void check_records(hub::HubStore& store) {
  auto& state = store.state();
  const auto generation = state.agents_generation();
  const auto [token, secret] =
      store.create_token(std::chrono::hours(1), 2, {"lab"}, {.name_pattern = "rack1-*"}, kStateNow);
  CHECK(state.tokens().size() == 1);
  CHECK(state.token(token.id)->secret_sha256 == token.secret_sha256);
  const auto first = store.enrol(enrolment_request(token.id, secret, "rack1-a"), kStateNow);
  store.enrol(enrolment_request(token.id, secret, "rack1-b"), kStateNow);
  CHECK_THAT(state_refusal_of(
                 [&] { store.enrol(enrolment_request(token.id, secret, "rack1-c"), kStateNow); }),
             Catch::Contains("used up"));
  CHECK(state.token(token.id)->uses_left == 0);
  const auto agents = state.agents();
  REQUIRE(agents.size() == 2);
  CHECK(agents.front().name == "rack1-a");  // by name
  CHECK(agents.front().labels == std::vector<std::string>{"lab"});
  CHECK(state.agents_generation() != generation);

  // Removal: the host's certificate revoked, in a CRL with a higher number.
  const auto before = state.revocations();
  const auto moved = state.agents_generation();
  CHECK(store.remove("rack1-a", kStateNow));
  CHECK_FALSE(state.agent("rack1-a"));
  CHECK(state.agents_generation() != moved);
  const auto after = state.revocations();
  CHECK(after.crl_number > before.crl_number);
  REQUIRE(after.records.size() == before.records.size() + 1);
  CHECK(after.records.back().serial == first.agent.certificates.front().serial);
  CHECK(net::certificate_facts(first.certificate_pem).serial == after.records.back().serial);

  // A refused change writes nothing.
  CHECK_THAT(state_refusal_of(
                 [&] { store.enrol(enrolment_request(token.id, "wrong", "rack1-d"), kStateNow); }),
             Catch::Contains("wrong secret"));
  CHECK(state.agents().size() == 1);
  CHECK(store.revoke_token(token.id));
  CHECK(state.tokens().empty());
  CHECK_FALSE(store.revoke_token(token.id));
}

}  // namespace

TEST_CASE("hub records behave alike in files and in PostgreSQL", "[hub][state]") {
  TempDir dir("hub-state");
  SECTION("files") {
    hub::HubStore store(hub_state_directory(dir, "hub"));
    check_records(store);
    CHECK(std::filesystem::exists(dir.path() / "hub/revoked.json"));
  }
  SECTION("PostgreSQL") {
    REQUIRE(testing::TempPostgres::available());
    testing::TempPostgres postgres;
    const auto target = net::parse_postgres_url(postgres.socket_url());
    hub::HubStore store(hub_state_directory(dir, "hub"), {}, hub::open_postgres_state(target));
    check_records(store);
    // No record in the state directory: every hub reads the same database.
    CHECK(std::filesystem::is_empty(dir.path() / "hub/agents"));
    CHECK(std::filesystem::is_empty(dir.path() / "hub/tokens"));
    // The CRL every hub serves is the database's, signed by the CA they share; the database's
    // first one comes after the one `init` wrote (number 1), so no number is used twice.
    CHECK(store.state().revocations().crl_pem == store.crl_pem());
    CHECK(store.state().revocations().crl_number == 2);
  }
}

TEST_CASE("hubs on one database enrol a one-use token exactly once between them", "[hub][state]") {
  REQUIRE(testing::TempPostgres::available());
  TwoHubsOnOneDatabase hubs;
  auto& hub_a = hubs.hub_a;
  auto& hub_b = hubs.hub_b;
  const auto [token, secret] = hub_a.create_token(std::chrono::hours(1), 1, {}, {}, kStateNow);
  CHECK(hub_b.tokens().size() == 1);  // made at A, known at B

  std::atomic<int> enrolled{0};
  std::atomic<int> used_up{0};
  std::vector<std::thread> joiners;
  for (int i = 0; i < 8; ++i) {
    joiners.emplace_back([&, i] {
      auto& hub = i % 2 == 0 ? hub_a : hub_b;
      const auto why = state_refusal_of([&] {
        hub.enrol(enrolment_request(token.id, secret, "host-" + std::to_string(i)), kStateNow);
        ++enrolled;
      });
      used_up += why.find("used up") != std::string::npos ? 1 : 0;
    });
  }
  for (auto& joiner : joiners) {
    joiner.join();
  }
  CHECK(enrolled == 1);
  CHECK(used_up == 7);
  CHECK(hub_a.agents().size() == 1);
  CHECK(hub_b.agents().size() == 1);

  // Removed at B: refused at A at once (its record and its serial in the shared CRL).
  const auto name = hub_a.agents().front().name;
  CHECK(hub_b.remove(name, kStateNow));
  CHECK_FALSE(hub_a.agent(name));
  CHECK(hub_a.revoked().size() == 1);
}

TEST_CASE("a hub that hangs holding the database's lock holds up no other hub for long",
          "[hub][state]") {
  REQUIRE(testing::TempPostgres::available());
  testing::TempPostgres postgres;
  auto target = net::parse_postgres_url(postgres.socket_url());
  target.timeout = std::chrono::seconds(1);  // the server ends a lock wait at 500 ms, idle at 3 s
  TempDir dir{"hub-state"};
  hub::HubStore hub_b{hub_state_directory(dir, "hub-b"), {}, hub::open_postgres_state(target)};
  // A hub that hung (or whose machine went silent) inside a change: its transaction holds the
  // hubs' lock, and it sends nothing more.
  net::PostgresConnection hung(target);
  hung.query("BEGIN");
  hung.query("SELECT pg_advisory_xact_lock(7453897216478232933)");
  const auto make_token = [&] { hub_b.create_token(std::chrono::hours(1), 1, {}, {}, kStateNow); };
  // The server ends the wait with its own error, before the client's deadline ends the
  // connection (and leaves the backend waiting on).
  CHECK_THROWS_WITH(make_token(), Catch::Contains("lock timeout"));
  CHECK(hub_b.tokens().empty());
  // The hung session is ended by the server, and its lock with it.
  std::this_thread::sleep_for(std::chrono::milliseconds(3500));
  make_token();
  CHECK(hub_b.tokens().size() == 1);
  CHECK_THROWS_AS(hung.query("SELECT 1"), net::PostgresError);
}

TEST_CASE("the hub's schema is versioned: migrated once, a newer one refused, a restart survived",
          "[hub][state]") {
  REQUIRE(testing::TempPostgres::available());
  testing::TempPostgres postgres;
  const auto target = net::parse_postgres_url(postgres.socket_url());
  auto state = hub::open_postgres_state(target);
  hub::open_postgres_state(target);  // a second hub starting: nothing to do
  const auto version = std::to_string(hub::postgres_schema_version());
  CHECK(postgres.sql("SELECT count(*), max(version) FROM garm_edge_hub_schema") ==
        version + "|" + version + "\n");

  // The database restarted under a running hub: its next read reconnects.
  CHECK(state->agents().empty());
  postgres.stop();
  postgres.start();
  CHECK(state->agents().empty());
  CHECK(state->agents_generation() == 0);

  postgres.sql("INSERT INTO garm_edge_hub_schema VALUES (99)");
  CHECK_THROWS_WITH(hub::open_postgres_state(target),
                    Catch::Contains("version 99") && Catch::Contains("upgrade this hub"));
}

TEST_CASE("a database of schema version 1 gets the hub registry and the clients, keeps its records",
          "[hub][state]") {
  REQUIRE(testing::TempPostgres::available());
  testing::TempPostgres postgres;
  const auto target = net::parse_postgres_url(postgres.socket_url());
  TempDir dir("hub-state");
  {
    hub::HubStore store(hub_state_directory(dir, "hub"), {}, hub::open_postgres_state(target));
    store.create_token(std::chrono::hours(1), 1, {}, {}, kStateNow);
  }
  // What a hub of version 1 left: no registry.
  postgres.sql(
      "DROP TABLE hub_peers, hub_clients; DELETE FROM garm_edge_hub_schema WHERE version > 1");

  auto state = hub::open_postgres_state(target);
  CHECK(postgres.sql("SELECT max(version) FROM garm_edge_hub_schema") ==
        std::to_string(hub::postgres_schema_version()) + "\n");
  CHECK(state->tokens().size() == 1);
  state->announce_hub("https://hub-b.example:8444", kStateNow - 86400);
  state->announce_hub("https://hub-a.example:8444", kStateNow);
  state->announce_hub("https://hub-a.example:8444", kStateNow + 30);
  const auto hubs = state->hubs();
  REQUIRE(hubs.size() == 2);
  CHECK(hubs[0].url == "https://hub-a.example:8444");
  CHECK(hubs[0].announced_at == kStateNow + 30);
  // An announcement a week after hub B's last drops B.
  state->announce_hub("https://hub-a.example:8444", kStateNow + 7 * 86400);
  CHECK(state->hubs().size() == 1);
}

TEST_CASE("every hub serves the CRL of the last revocation, whichever hub made it",
          "[hub][state][crl]") {
  REQUIRE(testing::TempPostgres::available());
  TwoHubsOnOneDatabase hubs;
  auto& hub_a = hubs.hub_a;
  auto& hub_b = hubs.hub_b;
  const auto [token, secret] = hub_a.create_token(std::chrono::hours(1), 1, {}, {}, kStateNow);
  hub_a.enrol(enrolment_request(token.id, secret, "rack1-a"), kStateNow);

  CHECK(hub_a.remove("rack1-a", kStateNow));
  CHECK(hub_a.crl_pem() == hub_a.state().revocations().crl_pem);
  CHECK(hub_b.crl_pem() != hub_a.crl_pem());  // B has not looked yet
  CHECK(hub_b.sync_crl());
  CHECK(hub_b.crl_pem() == hub_a.crl_pem());  // the CRL naming the removed host's serial
  CHECK_FALSE(hub_b.sync_crl());              // nothing newer

  // A copy read before B's own revocation committed never replaces B's newer CRL.
  const auto older = hub_b.state().revocations();
  CHECK(hub_b.revoke_client("garm", kStateNow));
  const auto newest = hub_b.crl_pem();
  hubs.postgres.sql("UPDATE hub_revocations SET crl_number = " + std::to_string(older.crl_number) +
                    ", crl_pem = '" + older.crl_pem + "'");
  CHECK_FALSE(hub_b.sync_crl());
  CHECK(hub_b.crl_pem() == newest);
}

TEST_CASE("a client issued at one hub is known at every hub: its name taken, revoked anywhere",
          "[hub][state][clients]") {
  REQUIRE(testing::TempPostgres::available());
  TwoHubsOnOneDatabase hubs;
  auto& hub_a = hubs.hub_a;
  auto& hub_b = hubs.hub_b;
  const auto issued = hub_a.issue_client("ops-laptop");
  const auto serial = net::certificate_facts(hub::read_text(issued.certificate)).serial;
  const auto clients = hub_b.state().clients();
  REQUIRE(clients.size() == 1);
  CHECK(clients[0].name == "ops-laptop");
  CHECK(clients[0].role == "client");
  CHECK(clients[0].serial == serial);

  // Hub B has no file of it, and still refuses the name to a host and to another client.
  CHECK_FALSE(std::filesystem::exists(hub_b.pki() / "clients/ops-laptop.crt"));
  CHECK_THAT(state_refusal_of([&] {
               hub_b.create_token(std::chrono::hours(1), 1, {}, {.name = "ops-laptop"}, kStateNow);
             }),
             Catch::Contains("client certificate's name"));
  CHECK_THAT(state_refusal_of([&] { hub_b.issue_client("OPS-laptop"); }),
             Catch::Contains("issued already"));

  // Revoked at hub B: in the shared CRL and the record gone (the files, on hub A's machine,
  // name a revoked certificate).
  CHECK(hub_b.revoke_client("ops-laptop", kStateNow));
  CHECK(hub_a.state().clients().empty());
  const auto revoked = hub_a.revoked();
  CHECK(std::any_of(revoked.begin(), revoked.end(), [&](const auto& record) {
    return record.serial == serial && record.holder == "client ops-laptop";
  }));
  CHECK_FALSE(hub_b.revoke_client("ops-laptop", kStateNow));
}

TEST_CASE("records move from files into the database and back, the CRL's number with them",
          "[hub][state][migrate]") {
  REQUIRE(testing::TempPostgres::available());
  testing::TempPostgres postgres;
  const auto target = net::parse_postgres_url(postgres.socket_url());
  TempDir dir("hub-state");
  const auto state_dir = hub_state_directory(dir, "hub");
  hub::HubStore on_files(state_dir);
  const auto [token, secret] =
      on_files.create_token(std::chrono::hours(1), 3, {"lab"}, {}, kStateNow);
  on_files.enrol(enrolment_request(token.id, secret, "rack1-a"), kStateNow);
  on_files.enrol(enrolment_request(token.id, secret, "rack1-b"), kStateNow);
  CHECK(on_files.remove("rack1-b", kStateNow));
  const auto files_before = on_files.state().revocations();
  const auto crl_before = on_files.crl_pem();

  auto database = hub::open_postgres_state(target);
  const auto into_database = hub::copy_records(on_files.state(), *database, state_dir / "pki");
  CHECK(into_database.tokens == 1);
  CHECK(into_database.agents == 1);
  CHECK(into_database.revocations == 1);
  CHECK(into_database.crl_number == files_before.crl_number);
  CHECK(database->token(token.id)->uses_left == 1);
  CHECK(database->agent("rack1-a")->labels == std::vector<std::string>{"lab"});
  CHECK(database->revocations().crl_pem == crl_before);  // the CRL the hub served
  // The client certificates issued (init's "garm"): their names stay taken at every hub.
  REQUIRE(database->clients().size() == 1);
  CHECK(database->clients().front().name == "garm");

  const auto aside = hub::set_file_records_aside(state_dir, kStateNow);
  CHECK(hub::records_in_files(state_dir) == 0);
  CHECK(std::filesystem::exists(aside / "agents/rack1-a.json"));

  // A second copy into the database would mix two fleets: refused, nothing written.
  hub::HubStore other(hub_state_directory(dir, "other"));
  other.create_token(std::chrono::hours(1), 1, {}, {}, kStateNow);
  CHECK_THAT(state_refusal_of(
                 [&] { hub::copy_records(other.state(), *database, dir.path() / "other/pki"); }),
             Catch::Contains("holds records already") && Catch::Contains("1 agents"));
  CHECK(database->tokens().size() == 1);

  // The hub on the database revokes once more; back on files, the number goes on from there.
  hub::HubStore on_database(state_dir, {}, hub::open_postgres_state(target));
  CHECK(on_database.remove("rack1-a", kStateNow));
  const auto number = database->revocations().crl_number;
  CHECK(number == files_before.crl_number + 1);
  const auto back = hub::copy_records(*database, on_files.state(), state_dir / "pki");
  CHECK(back.agents == 0);
  CHECK(back.revocations == 2);
  CHECK(on_files.state().revocations().crl_number == number);
  CHECK(on_files.crl_pem() == database->revocations().crl_pem);
  CHECK(on_files.revoke_token(token.id));
  hub::HubStore reopened(state_dir);
  CHECK(reopened.tokens().empty());
}
