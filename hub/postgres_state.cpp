// The hub's records in PostgreSQL (hub.toml's [database] url), shared by any number of hubs:
// each change is one transaction holding one advisory lock, so a one-use token enrols exactly
// once whichever hub is asked. Records are the same JSON as the files' (hub_records.hpp).

#include "hub/postgres_state.hpp"

#include <mutex>

#include <nlohmann/json.hpp>

#include "hub/hub_records.hpp"
#include "hub/hub_state.hpp"

namespace garm_edge::hub {
namespace {

using net::PostgresConnection;
using net::PostgresError;
using nlohmann::json;
using Parameters = std::vector<std::optional<std::string>>;

/// Every change and every migration of every hub on the database holds this lock ("garm-edge").
constexpr const char* kLockKey = "7453897216478232933";

/// Each schema version's statements, in order; a database is at the version its migrations
/// table says. Never edit one that shipped: add the next.
const std::vector<std::vector<std::string>> kMigrations = {
    {
        "CREATE TABLE hub_tokens (id text PRIMARY KEY, record jsonb NOT NULL)",
        "CREATE TABLE hub_agents (name text PRIMARY KEY, record jsonb NOT NULL)",
        "CREATE TABLE hub_revocations (only_row boolean PRIMARY KEY DEFAULT true "
        "CHECK (only_row), crl_number bigint NOT NULL, records jsonb NOT NULL, "
        "crl_pem text NOT NULL)",
        "CREATE TABLE hub_generations (only_row boolean PRIMARY KEY DEFAULT true "
        "CHECK (only_row), agents bigint NOT NULL)",
        "INSERT INTO hub_generations VALUES (true, 0)",
    },
    {
        "CREATE TABLE hub_peers (url text PRIMARY KEY, announced_at bigint NOT NULL)",
        "CREATE TABLE hub_clients (name text PRIMARY KEY, record jsonb NOT NULL)",
    },
};

/// A hub silent this long is gone for good (its rows would otherwise stay forever).
constexpr std::int64_t kForgetHubAfterSeconds = 7 * 86400;

json parsed(const std::optional<std::string>& text) {
  return json::parse(text.value_or("null"));
}

template <class Record, class Parse>
std::vector<Record> records_of(const net::PostgresResult& result, Parse parse) {
  std::vector<Record> records;
  for (const auto& row : result.rows) {
    try {
      records.push_back(parse(parsed(row.at(0))));
    } catch (const json::exception&) {
      // unreadable: grants nothing, as a torn file
    }
  }
  return records;
}

/// The reads and writes of one change, inside its transaction.
class PostgresChange final : public StateChange {
 public:
  explicit PostgresChange(PostgresConnection& db) : db_(db) {}

  std::vector<TokenRecord> tokens() override {
    return records_of<TokenRecord>(db_.query("SELECT record FROM hub_tokens ORDER BY id"),
                                   token_from_json);
  }
  std::optional<TokenRecord> token(const std::string& id) override {
    auto found = records_of<TokenRecord>(
        db_.query("SELECT record FROM hub_tokens WHERE id = $1", Parameters{id}), token_from_json);
    return found.empty() ? std::nullopt : std::optional(std::move(found.front()));
  }
  std::vector<AgentRecord> agents() override {
    return records_of<AgentRecord>(db_.query("SELECT record FROM hub_agents ORDER BY name"),
                                   agent_from_json);
  }
  std::optional<AgentRecord> agent(const std::string& name) override {
    auto found = records_of<AgentRecord>(
        db_.query("SELECT record FROM hub_agents WHERE name = $1", Parameters{name}),
        agent_from_json);
    return found.empty() ? std::nullopt : std::optional(std::move(found.front()));
  }
  RevocationList revocations() override {
    const auto result = db_.query("SELECT crl_number, records::text, crl_pem FROM hub_revocations");
    RevocationList list;
    if (result.rows.empty()) {
      return list;
    }
    const auto& row = result.rows.front();
    list.crl_number = std::stoull(row.at(0).value_or("0"));
    for (const auto& entry : parsed(row.at(1))) {
      list.records.push_back(revoked_from_json(entry));
    }
    list.crl_pem = row.at(2).value_or("");
    return list;
  }

  std::vector<ClientRecord> clients() override {
    return records_of<ClientRecord>(db_.query("SELECT record FROM hub_clients ORDER BY name"),
                                    client_from_json);
  }

  void put_client(const ClientRecord& client) override {
    db_.query(
        "INSERT INTO hub_clients VALUES ($1, $2::jsonb) "
        "ON CONFLICT (name) DO UPDATE SET record = EXCLUDED.record",
        Parameters{client.name, to_json(client).dump()});
  }
  bool remove_client(const std::string& name) override {
    return db_.query("DELETE FROM hub_clients WHERE name = $1", Parameters{name}).affected() == 1;
  }

  void put_token(const TokenRecord& token) override {
    db_.query(
        "INSERT INTO hub_tokens VALUES ($1, $2::jsonb) "
        "ON CONFLICT (id) DO UPDATE SET record = EXCLUDED.record",
        Parameters{token.id, to_json(token).dump()});
  }
  bool remove_token(const std::string& id) override {
    return db_.query("DELETE FROM hub_tokens WHERE id = $1", Parameters{id}).affected() == 1;
  }
  void put_agent(const AgentRecord& agent) override {
    db_.query(
        "INSERT INTO hub_agents VALUES ($1, $2::jsonb) "
        "ON CONFLICT (name) DO UPDATE SET record = EXCLUDED.record",
        Parameters{agent.name, to_json(agent).dump()});
    agents_changed();
  }
  bool remove_agent(const std::string& name) override {
    const bool removed =
        db_.query("DELETE FROM hub_agents WHERE name = $1", Parameters{name}).affected() == 1;
    if (removed) {
      agents_changed();
    }
    return removed;
  }
  void put_revocations(const RevocationList& list) override {
    json records = json::array();
    for (const auto& record : list.records) {
      records.push_back(to_json(record));
    }
    db_.query(
        "INSERT INTO hub_revocations VALUES (true, $1::bigint, $2::jsonb, $3) "
        "ON CONFLICT (only_row) DO UPDATE SET crl_number = EXCLUDED.crl_number, "
        "records = EXCLUDED.records, crl_pem = EXCLUDED.crl_pem",
        Parameters{std::to_string(list.crl_number), records.dump(), list.crl_pem});
    agents_changed();  // every hub copies the new CRL when it sees the generation move
  }

 private:
  void agents_changed() { db_.query("UPDATE hub_generations SET agents = agents + 1"); }

  PostgresConnection& db_;
};

class PostgresState final : public HubState {
 public:
  explicit PostgresState(net::PostgresTarget target) : target_(std::move(target)) {
    std::lock_guard lock(mutex_);
    migrate(connection());
  }

  void change(const std::function<void(StateChange&)>& change) override {
    std::lock_guard lock(mutex_);
    auto& db = begin();
    try {
      db.query("SELECT pg_advisory_xact_lock($1::bigint)", Parameters{kLockKey});
      PostgresChange view(db);
      change(view);
      db.query("COMMIT");
    } catch (...) {
      if (!db.broken()) {
        try {
          db.query("ROLLBACK");
        } catch (const PostgresError&) {
          // the connection goes: its transaction with it
        }
      }
      throw;
    }
  }

  std::vector<TokenRecord> tokens() override {
    return read([](StateReader& view) { return view.tokens(); });
  }
  std::optional<TokenRecord> token(const std::string& id) override {
    return read([&](StateReader& view) { return view.token(id); });
  }
  std::vector<AgentRecord> agents() override {
    return read([](StateReader& view) { return view.agents(); });
  }
  std::optional<AgentRecord> agent(const std::string& name) override {
    return read([&](StateReader& view) { return view.agent(name); });
  }
  RevocationList revocations() override {
    return read([](StateReader& view) { return view.revocations(); });
  }
  std::vector<ClientRecord> clients() override {
    return read([](StateReader& view) { return view.clients(); });
  }
  std::uint64_t agents_generation() override {
    std::lock_guard lock(mutex_);
    const auto result = retried(
        [](PostgresConnection& db) { return db.query("SELECT agents FROM hub_generations"); });
    return result.rows.empty() ? 0 : std::stoull(result.rows.front().at(0).value_or("0"));
  }
  void announce_hub(const std::string& url, std::int64_t now) override {
    std::lock_guard lock(mutex_);
    retried([&](PostgresConnection& db) {
      return db.query(
          "INSERT INTO hub_peers VALUES ($1, $2::bigint) "
          "ON CONFLICT (url) DO UPDATE SET announced_at = EXCLUDED.announced_at",
          Parameters{url, std::to_string(now)});
    });
    retried([&](PostgresConnection& db) {
      return db.query("DELETE FROM hub_peers WHERE announced_at < $1::bigint",
                      Parameters{std::to_string(now - kForgetHubAfterSeconds)});
    });
  }
  std::vector<HubAnnouncement> hubs() override {
    std::lock_guard lock(mutex_);
    const auto result = retried([](PostgresConnection& db) {
      return db.query("SELECT url, announced_at FROM hub_peers ORDER BY url");
    });
    std::vector<HubAnnouncement> hubs;
    for (const auto& row : result.rows) {
      hubs.push_back(
          {.url = row.at(0).value_or(""), .announced_at = std::stoll(row.at(1).value_or("0"))});
    }
    return hubs;
  }
  std::string describe() const override { return target_.describe(); }

 private:
  /// The connection, made again when the last one was lost (the database restarted).
  PostgresConnection& connection() {
    if (!db_ || db_->broken()) {
      db_.reset();
      db_ = std::make_unique<PostgresConnection>(target_);
    }
    return *db_;
  }

  /// `run` on the connection; once more on a new one when the old one turned out lost before
  /// anything was done on it (the database restarted since it was last used).
  template <class Run>
  auto retried(const Run& run) -> decltype(run(std::declval<PostgresConnection&>())) {
    try {
      return run(connection());
    } catch (const PostgresError& e) {
      if (!e.sqlstate().empty()) {
        throw;
      }
      return run(connection());
    }
  }

  /// A transaction begun, on a connection that answered.
  PostgresConnection& begin() {
    retried([](PostgresConnection& db) { return db.query("BEGIN"); });
    return *db_;
  }

  template <class Read>
  auto read(const Read& what) -> decltype(what(std::declval<StateReader&>())) {
    std::lock_guard lock(mutex_);
    return retried([&](PostgresConnection& db) {
      PostgresChange view(db);
      return what(static_cast<StateReader&>(view));
    });
  }

  static void migrate(PostgresConnection& db) {
    db.query("BEGIN");
    try {
      db.query("SELECT pg_advisory_xact_lock($1::bigint)", Parameters{kLockKey});
      db.query("CREATE TABLE IF NOT EXISTS garm_edge_hub_schema (version integer NOT NULL)");
      const auto current = db.query("SELECT max(version) FROM garm_edge_hub_schema");
      const auto version = std::stoul(current.rows.at(0).at(0).value_or("0"));
      if (version > kMigrations.size()) {
        throw PostgresError("the database's hub schema is version " + std::to_string(version) +
                            ", newer than this hub's " + std::to_string(kMigrations.size()) +
                            ": upgrade this hub first");
      }
      for (auto next = version; next < kMigrations.size(); ++next) {
        for (const auto& statement : kMigrations[next]) {
          db.query(statement);
        }
        db.query("INSERT INTO garm_edge_hub_schema VALUES ($1::integer)",
                 Parameters{std::to_string(next + 1)});
      }
      db.query("COMMIT");
    } catch (...) {
      if (!db.broken()) {
        db.query("ROLLBACK");
      }
      throw;
    }
  }

  net::PostgresTarget target_;
  std::recursive_mutex mutex_;  // a read inside a change runs inside its transaction
  std::unique_ptr<PostgresConnection> db_;
};

}  // namespace

std::unique_ptr<HubState> open_postgres_state(const net::PostgresTarget& target) {
  return std::make_unique<PostgresState>(target);
}

std::size_t postgres_schema_version() {
  return kMigrations.size();
}

}  // namespace garm_edge::hub
