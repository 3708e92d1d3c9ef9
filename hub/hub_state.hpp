#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "hub/hub_store.hpp"

namespace garm_edge::hub {

/// The revocations and the number of the CRL last made from them.
struct RevocationList {
  std::vector<RevokedRecord> records;
  std::uint64_t crl_number = 0;
  std::string crl_pem;  // as made with that number; empty: not kept here (files: pki/crl.pem)
};

/// A hub of the fleet as it last announced itself: where agents dial it.
struct HubAnnouncement {
  std::string url;
  std::int64_t announced_at = 0;  // unix seconds
};

/// What the hub's records hold now.
class StateReader {
 public:
  virtual ~StateReader() = default;
  virtual std::vector<TokenRecord> tokens() = 0;
  virtual std::optional<TokenRecord> token(const std::string& id) = 0;
  virtual std::vector<AgentRecord> agents() = 0;  // by name
  virtual std::optional<AgentRecord> agent(const std::string& name) = 0;
  virtual RevocationList revocations() = 0;
  /// The client certificates issued (files: those under pki/clients, their own record).
  virtual std::vector<ClientRecord> clients() = 0;
};

/// One change of the hub's records: what it reads no other change alters until it ends.
class StateChange : public StateReader {
 public:
  virtual void put_token(const TokenRecord& token) = 0;
  virtual bool remove_token(const std::string& id) = 0;
  virtual void put_agent(const AgentRecord& agent) = 0;
  virtual bool remove_agent(const std::string& name) = 0;
  virtual void put_revocations(const RevocationList& list) = 0;
  /// Files keep no client records beside the certificates: both are no-ops there.
  virtual void put_client(const ClientRecord& client) = 0;
  virtual bool remove_client(const std::string& name) = 0;
};

/// Where the hub's records live: files in its state directory (one hub), or PostgreSQL (any
/// number of hubs sharing it). The CA and the hub's keys never live here: they stay files.
class HubState : public StateReader {
 public:
  /// Runs `change` exclusively of every other change by any hub or command on this state, and
  /// keeps its writes when it returns. When it throws: PostgreSQL keeps none of them; files keep
  /// those written before (each file is replaced whole), so a change writes the safe one first.
  virtual void change(const std::function<void(StateChange&)>& change) = 0;
  /// Moves with every change of an agent, by whichever hub made it (PostgreSQL: and of the
  /// revocations, whose CRL every hub copies then).
  virtual std::uint64_t agents_generation() = 0;
  /// Says that a hub reached at `url` (its hub.toml's url) serves this state now; a hub on files
  /// is the only one, so files keep nothing. Hubs stale for a week are dropped.
  virtual void announce_hub(const std::string& url, std::int64_t now) = 0;
  /// Every hub announced on this state, by URL (files: none).
  virtual std::vector<HubAnnouncement> hubs() = 0;
  /// For logs and errors: the directory, or the database without its password.
  virtual std::string describe() const = 0;
};

/// The embedded default: tokens/, agents/ and revoked.json under `directory`, each change under
/// an exclusive flock of `directory`/lock.
std::unique_ptr<HubState> open_file_state(const std::filesystem::path& directory);

}  // namespace garm_edge::hub
