#pragma once

// The hub's records on disk (tokens, agents, revocations) as JSON, and how they are read: a
// torn or foreign file grants nothing.

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "hub/hub_store.hpp"

namespace garm_edge::hub {

nlohmann::json to_json(const TokenRecord& token);

/// Tokens made before names were the operator's carry none: they make hub-only hosts.
TokenRecord token_from_json(const nlohmann::json& in);
nlohmann::json to_json(const RevokedRecord& record);
RevokedRecord revoked_from_json(const nlohmann::json& in);
nlohmann::json to_json(const AgentRecord& agent);
nlohmann::json to_json(const ClientRecord& client);
ClientRecord client_from_json(const nlohmann::json& in);
AgentRecord agent_from_json(const nlohmann::json& in);
/// A record file, or nothing when it is missing or unreadable (a torn or foreign file names
/// no token and no agent: it grants nothing).
std::optional<nlohmann::json> read_record(const std::filesystem::path& path);
/// Two-space JSON and a final newline, as every record is written.
std::string serialize(const nlohmann::json& value);
/// The whole file; throws DurableFileError when it is missing.
std::string read_text(const std::filesystem::path& path);

template <class Record, class Parse>
std::vector<Record> read_records(const std::filesystem::path& directory, Parse parse) {
  std::vector<Record> records;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(directory, error)) {
    if (entry.path().extension() != ".json") {
      continue;
    }
    if (const auto record = read_record(entry.path())) {
      try {
        records.push_back(parse(*record));
      } catch (const nlohmann::json::exception&) {
        // unreadable: grants nothing
      }
    }
  }
  return records;
}

}  // namespace garm_edge::hub
