// The hub's records as files in its state directory: the embedded default for one hub.
//   tokens/<id>.json     join tokens (secrets as SHA-256 only)
//   agents/<name>.json   enrolled agents and the serials of their certificates
//   revoked.json         certificates revoked and not yet expired, and the CRL's number
//   pki/clients/*.crt    the client certificates issued: their own records
// Every change holds an exclusive flock on `lock`; every file is replaced whole.

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include "common/durable_file.hpp"
#include "common/unique_fd.hpp"
#include "hub/hub_records.hpp"
#include "hub/hub_state.hpp"
#include "net/pki.hpp"
#include "wire/identity.hpp"
#include "wire/join_token.hpp"

namespace garm_edge::hub {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

/// One record file; nothing when it is missing, torn or foreign (it grants nothing).
template <class Record, class Parse>
std::optional<Record> read_one(const fs::path& path, Parse parse) {
  const auto record = read_record(path);
  try {
    return record ? std::optional<Record>(parse(*record)) : std::nullopt;
  } catch (const json::exception&) {
    return std::nullopt;
  }
}

class FileState final : public HubState, private StateChange {
  // One object for both: outside a change its reads are the state's, inside they are the
  // change's (the flock keeps every other change out meanwhile).
 public:
  explicit FileState(fs::path directory) : directory_(std::move(directory)) {
    make_private_directory(directory_ / "tokens");
    make_private_directory(directory_ / "agents");
  }

  void change(const std::function<void(StateChange&)>& change) override {
    UniqueFd fd(::open((directory_ / "lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
    if (fd.get() < 0 || ::flock(fd.get(), LOCK_EX) != 0) {
      throw DurableFileError("cannot lock " + (directory_ / "lock").string() + ": " +
                             std::strerror(errno));
    }
    change(static_cast<StateChange&>(*this));
  }

  std::vector<TokenRecord> tokens() override {
    return read_records<TokenRecord>(directory_ / "tokens", token_from_json);
  }

  std::vector<AgentRecord> agents() override {
    auto agents = read_records<AgentRecord>(directory_ / "agents", agent_from_json);
    std::sort(agents.begin(), agents.end(),
              [](const auto& a, const auto& b) { return a.name < b.name; });
    return agents;
  }

  std::optional<AgentRecord> agent(const std::string& name) override {
    return is_agent_name(name) ? read_one<AgentRecord>(agent_path(name), agent_from_json)
                               : std::nullopt;
  }

  std::optional<TokenRecord> token(const std::string& id) override {
    return wire::is_token_id(id) ? read_one<TokenRecord>(token_path(id), token_from_json)
                                 : std::nullopt;
  }

  RevocationList revocations() override {
    RevocationList list;
    const auto path = directory_ / "revoked.json";
    const auto document = read_record(path);
    if (!document) {
      return list;
    }
    try {
      for (const auto& entry : document->at("certificates")) {
        list.records.push_back(revoked_from_json(entry));
      }
      list.crl_number = document->value("crl_number", std::uint64_t{0});
    } catch (const json::exception&) {
      throw DurableFileError(path.string() + " is damaged");
    }
    return list;
  }

  std::uint64_t agents_generation() override {
    // The directory's change time moves with every rename into it and every removal; with
    // nanoseconds two changes in one second still differ.
    struct stat info {};
    if (::stat((directory_ / "agents").c_str(), &info) != 0) {
      return 0;
    }
    return static_cast<std::uint64_t>(info.st_ctim.tv_sec) * 1000000000ULL +
           static_cast<std::uint64_t>(info.st_ctim.tv_nsec);
  }

  void announce_hub(const std::string& /*url*/, std::int64_t /*now*/) override {}
  std::vector<HubAnnouncement> hubs() override { return {}; }

  std::vector<ClientRecord> clients() override {
    std::vector<ClientRecord> clients;
    std::error_code error;
    for (const auto& entry : fs::directory_iterator(directory_ / "pki" / "clients", error)) {
      if (entry.path().extension() != ".crt") {
        continue;
      }
      try {
        const auto facts = net::certificate_facts(read_text(entry.path()));
        const auto claims = wire::role_claims(facts.uri_names);
        clients.push_back(
            {.name = entry.path().stem().string(),
             .role = claims.empty() ? "client" : std::string(wire::to_string(claims.front().role)),
             .serial = facts.serial,
             .not_after = facts.not_after_unix,
             .issued_at = facts.not_before_unix});
      } catch (const std::exception&) {
        // unreadable: names no client
      }
    }
    std::sort(clients.begin(), clients.end(),
              [](const auto& a, const auto& b) { return a.name < b.name; });
    return clients;
  }

  std::string describe() const override { return directory_.string(); }

 private:
  fs::path token_path(const std::string& id) const {
    return directory_ / "tokens" / (id + ".json");
  }
  fs::path agent_path(const std::string& name) const {
    return directory_ / "agents" / (name + ".json");
  }

  void put_token(const TokenRecord& token) override {
    write_atomically(token_path(token.id), serialize(to_json(token)));
  }
  bool remove_token(const std::string& id) override {
    return wire::is_token_id(id) && fs::remove(token_path(id));
  }
  void put_agent(const AgentRecord& agent) override {
    write_atomically(agent_path(agent.name), serialize(to_json(agent)));
  }
  bool remove_agent(const std::string& name) override {
    if (!is_agent_name(name) || !fs::remove(agent_path(name))) {
      return false;
    }
    fsync_directory(directory_ / "agents");
    return true;
  }
  // The certificate under pki/clients is the record.
  void put_client(const ClientRecord& /*client*/) override {}
  bool remove_client(const std::string& /*name*/) override { return false; }
  void put_revocations(const RevocationList& list) override {
    json entries = json::array();
    for (const auto& record : list.records) {
      entries.push_back(to_json(record));
    }
    write_atomically(directory_ / "revoked.json",
                     serialize({{"crl_number", list.crl_number}, {"certificates", entries}}));
  }

  fs::path directory_;
};

}  // namespace

std::unique_ptr<HubState> open_file_state(const fs::path& directory) {
  return std::make_unique<FileState>(directory);
}

}  // namespace garm_edge::hub
