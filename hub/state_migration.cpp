#include "hub/state_migration.hpp"

#include <string>

#include "common/durable_file.hpp"
#include "hub/hub_records.hpp"
#include "hub/hub_store.hpp"

namespace garm_edge::hub {
namespace {

namespace fs = std::filesystem;

void require_empty(StateReader& target, const std::string& describe) {
  const auto tokens = target.tokens().size();
  const auto agents = target.agents().size();
  const auto revocations = target.revocations().records.size();
  if (tokens + agents + revocations > 0) {
    throw Refused(describe + " holds records already (" + std::to_string(tokens) + " tokens, " +
                  std::to_string(agents) + " agents, " + std::to_string(revocations) +
                  " revocations): records are moved only into an empty state");
  }
}

}  // namespace

MigratedRecords copy_records(HubState& from, HubState& to, const fs::path& pki_directory) {
  const auto crl_path = pki_directory / "crl.pem";
  MigratedRecords copied;
  RevocationList revocations;
  to.change([&](StateChange& target) {
    require_empty(target, to.describe());
    // Read inside the target's change: an enrolment at a hub still on the source in between
    // would be lost, so the docs stop the hubs first; this keeps the copy whole regardless.
    const auto tokens = from.tokens();
    const auto agents = from.agents();
    revocations = from.revocations();
    if (revocations.crl_pem.empty()) {
      revocations.crl_pem = read_file(crl_path).value_or("");
    }
    for (const auto& token : tokens) {
      target.put_token(token);
    }
    for (const auto& agent : agents) {
      target.put_agent(agent);
    }
    for (const auto& client : from.clients()) {
      target.put_client(client);  // files: the certificates under pki/clients are the records
    }
    target.put_revocations(revocations);
    copied = {.tokens = tokens.size(),
              .agents = agents.size(),
              .revocations = revocations.records.size(),
              .crl_number = revocations.crl_number};
  });
  if (!revocations.crl_pem.empty()) {
    write_atomically(crl_path, revocations.crl_pem, 0644);
  }
  return copied;
}

std::size_t records_in_files(const fs::path& state_dir) {
  std::size_t count = 0;
  for (const auto* folder : {"tokens", "agents"}) {
    std::error_code error;
    for (const auto& entry : fs::directory_iterator(state_dir / folder, error)) {
      if (entry.path().extension() == ".json") {
        ++count;
      }
    }
  }
  return count;
}

fs::path set_file_records_aside(const fs::path& state_dir, UnixSeconds now) {
  const auto aside = state_dir / ("moved-to-database-" + std::to_string(now));
  make_private_directory(aside);
  for (const auto* name : {"tokens", "agents", "revoked.json"}) {
    if (fs::exists(state_dir / name)) {
      fs::rename(state_dir / name, aside / name);
    }
  }
  // An empty file state, as `init` leaves it: migrating back finds it empty.
  make_private_directory(state_dir / "tokens");
  make_private_directory(state_dir / "agents");
  fsync_directory(state_dir);
  return aside;
}

}  // namespace garm_edge::hub
