// The hub's PostgreSQL client against a real PostgreSQL 15 (Debian's binaries, a temporary
// cluster): the unix socket, SCRAM-SHA-256 over TCP, TLS checked against the server's CA,
// statements with parameters, the server's refusals, a lost connection and deadlines.

#include "net/postgres_client.hpp"

#include <catch2/catch.hpp>

#include "support/scripted_server.hpp"
#include "support/temp_postgres.hpp"

using namespace garm_edge;
using namespace std::chrono_literals;
using net::PostgresError;
using net::PostgresTarget;
using Parameters = std::vector<std::optional<std::string>>;

namespace {

std::string postgres_refusal_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const PostgresError& e) {
    return e.what();
  }
  return "not refused";
}

}  // namespace

TEST_CASE("a database URL reads as libpq reads it", "[postgres][unit]") {
  const auto target = net::parse_postgres_url(
      "postgresql://hub:p%40ss%3Aword@db.lab:6432/garm_edge?sslmode=require&connect_timeout=3");
  CHECK(target.host == "db.lab");
  CHECK(target.port == 6432);
  CHECK(target.user == "hub");
  CHECK(target.password == "p@ss:word");
  CHECK(target.database == "garm_edge");
  CHECK(target.tls == PostgresTarget::Tls::require);
  CHECK(target.timeout == 3s);
  CHECK(target.describe() == "postgresql://hub@db.lab:6432/garm_edge");  // never the password

  const auto socket = net::parse_postgres_url("postgresql://hub@/garm?host=/run/postgresql");
  CHECK(socket.unix_socket());
  CHECK(socket.tls == PostgresTarget::Tls::disable);  // a unix socket needs none
  const auto v6 = net::parse_postgres_url("postgres://hub@[::1]:5433");
  CHECK(v6.host == "::1");
  CHECK(v6.port == 5433);
  CHECK(v6.database == "hub");
  CHECK(v6.tls == PostgresTarget::Tls::verify_full);  // over TCP: checked unless told otherwise

  for (const char* bad :
       {"mysql://hub@db/x", "postgresql://db/x", "postgresql://hub@db:99999/x",
        "postgresql://hub@db/x?sslmode=prefer", "postgresql://hub@db/x?options=-c%20x",
        "postgresql://hub@db/x?sslrootcert=/nonexistent/ca.pem", "postgresql://hub@db/%zz"}) {
    INFO(bad);
    CHECK_THROWS_AS(net::parse_postgres_url(bad), PostgresError);
  }
}

TEST_CASE("statements run with parameters, refusals keep the connection, a lost one says so",
          "[postgres][integration]") {
  INFO("PostgreSQL 15's server binaries come from scripts/install-deps.sh (postgresql-15)");
  REQUIRE(testing::TempPostgres::available());
  testing::TempPostgres postgres;
  net::PostgresConnection db(net::parse_postgres_url(postgres.socket_url()));

  const auto sum = db.query("SELECT $1::int + $2::int AS sum, $3::text IS NULL AS missing",
                            Parameters{"40", "2", std::nullopt});
  CHECK(sum.columns == std::vector<std::string>{"sum", "missing"});
  REQUIRE(sum.rows.size() == 1);
  CHECK(sum.rows[0][0] == "42");
  CHECK(sum.rows[0][1] == "t");

  db.query("CREATE TABLE tokens (id text PRIMARY KEY, record jsonb NOT NULL)");
  // A value is data, never SQL: quotes and UTF-8 arrive as they were sent.
  const std::string awkward = R"({"labels": ["it's", "ünïcode", "\"; DROP TABLE tokens; --"]})";
  CHECK(
      db.query("INSERT INTO tokens VALUES ($1, $2::jsonb)", Parameters{"a", awkward}).affected() ==
      1);
  const auto read = db.query("SELECT record->'labels'->>0, record->'labels'->>1 FROM tokens");
  CHECK(read.rows.at(0)[0] == "it's");
  CHECK(read.rows.at(0)[1] == "ünïcode");

  try {
    db.query("INSERT INTO tokens VALUES ($1, '{}')", Parameters{"a"});
    FAIL("a duplicate key was taken");
  } catch (const PostgresError& e) {
    CHECK(e.sqlstate() == "23505");
    CHECK_THAT(e.what(), Catch::Contains("duplicate key"));
  }
  CHECK_FALSE(db.broken());
  CHECK(db.query("SELECT count(*) FROM tokens").rows.at(0)[0] == "1");  // still usable

  // A transaction's writes are kept together or not at all.
  db.query("BEGIN");
  db.query("INSERT INTO tokens VALUES ('b', '{}')");
  db.query("ROLLBACK");
  CHECK(db.query("SELECT count(*) FROM tokens").rows.at(0)[0] == "1");

  postgres.stop();
  const auto lost = postgres_refusal_of([&] { db.query("SELECT 1"); });
  CHECK_THAT(lost, Catch::Contains("postgresql://postgres@"));
  CHECK(db.broken());
  postgres.start();
  CHECK_THAT(postgres_refusal_of([&] { db.query("SELECT 1"); }), Catch::Contains("was lost"));
  net::PostgresConnection again(net::parse_postgres_url(postgres.socket_url()));
  CHECK(again.query("SELECT count(*) FROM tokens").rows.at(0)[0] == "1");
}

TEST_CASE("over TCP the password goes by SCRAM-SHA-256 and TLS checks the server",
          "[postgres][integration]") {
  INFO("PostgreSQL 15's server binaries come from scripts/install-deps.sh (postgresql-15)");
  REQUIRE(testing::TempPostgres::available());
  testing::TempPostgres postgres;
  postgres.sql("CREATE ROLE hub LOGIN PASSWORD 'correct horse'");
  const auto url = [&](const std::string& credentials, const std::string& parameters) {
    return "postgresql://" + credentials + "@127.0.0.1:" + std::to_string(postgres.port()) +
           "/postgres?" + parameters;
  };
  const auto tls_verified = "sslmode=verify-full&sslrootcert=" + postgres.ca_file().string();

  net::PostgresConnection plain(
      net::parse_postgres_url(url("hub:correct%20horse", "sslmode=disable")));
  CHECK(plain.query("SELECT current_user").rows.at(0)[0] == "hub");
  net::PostgresConnection verified(
      net::parse_postgres_url(url("hub:correct%20horse", tls_verified)));
  CHECK(verified.query("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()").rows.at(0)[0] ==
        "t");

  CHECK_THAT(postgres_refusal_of([&] {
               net::PostgresConnection(net::parse_postgres_url(url("hub:wrong", tls_verified)));
             }),
             Catch::Contains("password authentication failed") && Catch::Contains("28P01"));
  // Another CA: the server is refused before any password is sent.
  testing::TempPostgres other;
  const auto wrong_ca = "sslmode=verify-full&sslrootcert=" + other.ca_file().string();
  CHECK_THAT(
      postgres_refusal_of([&] {
        net::PostgresConnection(net::parse_postgres_url(url("hub:correct%20horse", wrong_ca)));
      }),
      Catch::Contains("certificate"));
}

TEST_CASE("a server that answers nothing is given up at the deadline", "[postgres][integration]") {
  const testing::ScriptedServer silent("");  // takes the connection, then never speaks
  const auto address = silent.url("");
  const auto port = address.substr(address.rfind(':') + 1);
  const auto started = std::chrono::steady_clock::now();
  const auto refusal = postgres_refusal_of([&] {
    net::PostgresConnection(net::parse_postgres_url("postgresql://hub@127.0.0.1:" + port +
                                                    "/x?sslmode=disable&connect_timeout=1"));
  });
  CHECK(refusal != "not refused");
  CHECK(std::chrono::steady_clock::now() - started < 10s);
}
