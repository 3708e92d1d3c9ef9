#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>

#include "hub/hub_state.hpp"
#include "hub/hub_store.hpp"

namespace garm_edge::hub {

struct MigratedRecords {
  std::size_t tokens = 0;
  std::size_t agents = 0;
  std::size_t revocations = 0;
  std::uint64_t crl_number = 0;
};

/// Copies every token, agent and revocation (with the CRL's number and, from files, the CRL in
/// `pki_directory`) from one state into another in one change of the target, which must hold no
/// token, agent or revocation yet (Refused otherwise: two fleets' records never mix). The CRL
/// the target keeps is the source's, so a CRL number never goes back.
MigratedRecords copy_records(HubState& from, HubState& to,
                             const std::filesystem::path& pki_directory);

/// Token and agent records in `state_dir`'s files: a hub on a database refuses to start beside
/// them (they were meant to be moved into it first).
std::size_t records_in_files(const std::filesystem::path& state_dir);

/// After a move into the database: the files' records go to `state_dir`/moved-to-database-NOW
/// (the hub reads them no more, so a record removed later cannot come back from them).
std::filesystem::path set_file_records_aside(const std::filesystem::path& state_dir,
                                             UnixSeconds now);

}  // namespace garm_edge::hub
