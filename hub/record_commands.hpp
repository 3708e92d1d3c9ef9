#pragma once

#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "hub/hub_config.hpp"
#include "hub/hub_store.hpp"

namespace garm_edge::hub {

/// The commands that read or change the hub's records: `token create|list|revoke`, `agents`,
/// `remove`, `issue-client`, `revoke-client`, `revoked`. A running hub runs them for the CLI of
/// its machine on its admin socket (admin_socket_path(state_dir)), so that only the daemon
/// writes its state directory; with none running, the CLI runs them on the database or the
/// files.
bool is_record_command(std::string_view command);

struct RecordCommandResult {
  int exit_code = 0;
  std::string out;
  std::string err;
};

/// Runs `arguments` (the command line from the command on, as the CLI got it; its --config is
/// `config`'s) on `store`. Never throws: a usage error exits 2 with the usage, any other 1.
RecordCommandResult run_record_command(HubStore& store, const HubConfig& config,
                                       const std::vector<std::string>& arguments,
                                       std::string_view usage);

}  // namespace garm_edge::hub
