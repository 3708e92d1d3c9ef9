// hub.toml's [database]: where the hub's records live when several hubs share them.

#include "hub/hub_config.hpp"

#include <fstream>

#include <catch2/catch.hpp>

#include "common/config_error.hpp"
#include "common/temp_dir.hpp"

using namespace garm_edge;

namespace {

std::string hub_toml_with(const std::string& database_table) {
  return "url = \"https://hub.lab:8444\"\n" + database_table +
         "\n[[clients]]\nidentity = \"garm\"\ncontrollers = [\"*\"]\n";
}

std::string database_refusal(const std::string& database_table) {
  try {
    hub::parse_hub_config(hub_toml_with(database_table), "hub.toml");
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "accepted";
}

}  // namespace

TEST_CASE("hub.toml's [database] names the records' PostgreSQL, never echoing a password",
          "[hub][config]") {
  CHECK_FALSE(hub::parse_hub_config(hub_toml_with(""), "hub.toml").database);

  const auto config = hub::parse_hub_config(
      hub_toml_with("[database]\nurl = \"postgresql://garm_edge:s3cret@db.lab:6432/fleet"
                    "?sslmode=require\"\ntimeout_ms = 2500\n"),
      "hub.toml");
  REQUIRE(config.database);
  CHECK(config.database->host == "db.lab");
  CHECK(config.database->port == 6432);
  CHECK(config.database->user == "garm_edge");
  CHECK(config.database->password == "s3cret");
  CHECK(config.database->database == "fleet");
  CHECK(config.database->tls == net::PostgresTarget::Tls::require);
  CHECK(config.database->timeout == std::chrono::milliseconds(2500));

  const auto wrong = database_refusal("[database]\nurl = \"mysql://root:s3cret@db.lab/fleet\"\n");
  CHECK_THAT(wrong, Catch::Contains("hub.toml") && Catch::Contains("postgresql://"));
  CHECK_THAT(wrong, !Catch::Contains("s3cret"));
  CHECK_THAT(database_refusal("[database]\nurl = \"postgresql://u@h/d?sslmode=prefer\"\n"),
             Catch::Contains("sslmode"));
  CHECK_THAT(database_refusal("[database]\nurl = \"postgresql://u@h/d\"\nport = 5432\n"),
             Catch::Contains("port"));
  CHECK_THAT(database_refusal("[database]\ntimeout_ms = 100\n"), Catch::Contains("url"));
}

TEST_CASE("the database's password may come from a file of its own", "[hub][config]") {
  TempDir dir("hub-config");
  const auto password_file = dir.path() / "db-password";
  std::ofstream(password_file) << "from-the-file\n";
  const auto config = hub::parse_hub_config(
      hub_toml_with("[database]\nurl = \"postgresql://garm_edge@db.lab/fleet\"\n"
                    "password_file = \"" +
                    password_file.string() + "\"\n"),
      "hub.toml");
  REQUIRE(config.database);
  CHECK(config.database->password == "from-the-file");  // its line, without the newline

  CHECK_THAT(database_refusal("[database]\nurl = \"postgresql://u:p@db.lab/fleet\"\n"
                              "password_file = \"" +
                              password_file.string() + "\"\n"),
             Catch::Contains("one or the other"));
  CHECK_THAT(database_refusal("[database]\nurl = \"postgresql://u@db.lab/fleet\"\n"
                              "password_file = \"" +
                              (dir.path() / "missing").string() + "\"\n"),
             Catch::Contains("missing"));
}
