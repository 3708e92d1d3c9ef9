#include "hub/hub_records.hpp"

#include "common/durable_file.hpp"

namespace garm_edge::hub {
namespace fs = std::filesystem;
using nlohmann::json;
using Strings = std::vector<std::string>;

json to_json(const TokenRecord& token) {
  return {{"id", token.id},
          {"secret_sha256", token.secret_sha256},
          {"created_at", token.created_at},
          {"expires_at", token.expires_at},
          {"uses_left", token.uses_left},
          {"labels", token.labels},
          {"host_name", token.host.name},
          {"host_name_pattern", token.host.name_pattern},
          {"dns_names", token.host.dns_names},
          {"ip_addresses", token.host.ip_addresses}};
}

/// Tokens made before names were the operator's carry none: they make hub-only hosts.
TokenRecord token_from_json(const json& in) {
  return {.id = in.at("id").get<std::string>(),
          .secret_sha256 = in.at("secret_sha256").get<std::string>(),
          .created_at = in.at("created_at").get<UnixSeconds>(),
          .expires_at = in.at("expires_at").get<UnixSeconds>(),
          .uses_left = in.at("uses_left").get<unsigned>(),
          .labels = in.at("labels").get<Strings>(),
          .host = {.name = in.value("host_name", std::string()),
                   .name_pattern = in.value("host_name_pattern", std::string()),
                   .dns_names = in.value("dns_names", Strings()),
                   .ip_addresses = in.value("ip_addresses", Strings())}};
}

json to_json(const RevokedRecord& record) {
  return {{"serial", record.serial},
          {"holder", record.holder},
          {"not_after", record.not_after},
          {"revoked_at", record.revoked_at}};
}

RevokedRecord revoked_from_json(const json& in) {
  return {.serial = in.at("serial").get<std::string>(),
          .holder = in.at("holder").get<std::string>(),
          .not_after = in.at("not_after").get<UnixSeconds>(),
          .revoked_at = in.at("revoked_at").get<UnixSeconds>()};
}

json to_json(const AgentRecord& agent) {
  json certificates = json::array();
  for (const auto& certificate : agent.certificates) {
    certificates.push_back({{"serial", certificate.serial},
                            {"not_before", certificate.not_before},
                            {"not_after", certificate.not_after}});
  }
  return {{"name", agent.name},
          {"labels", agent.labels},
          {"enrolled_at", agent.enrolled_at},
          {"token_id", agent.token_id},
          {"certificates", certificates},
          {"dns_names", agent.dns_names},
          {"ip_addresses", agent.ip_addresses},
          {"renewed_at", agent.renewed_at}};
}

nlohmann::json to_json(const ClientRecord& client) {
  return {{"name", client.name},
          {"role", client.role},
          {"serial", client.serial},
          {"not_after", client.not_after},
          {"issued_at", client.issued_at}};
}

ClientRecord client_from_json(const nlohmann::json& in) {
  return {.name = in.at("name").get<std::string>(),
          .role = in.at("role").get<std::string>(),
          .serial = in.at("serial").get<std::string>(),
          .not_after = in.at("not_after").get<UnixSeconds>(),
          .issued_at = in.value("issued_at", UnixSeconds{0})};
}

AgentRecord agent_from_json(const json& in) {
  AgentRecord agent{.name = in.at("name").get<std::string>(),
                    .labels = in.at("labels").get<std::vector<std::string>>(),
                    .enrolled_at = in.at("enrolled_at").get<UnixSeconds>(),
                    .token_id = in.at("token_id").get<std::string>(),
                    .certificates = {},
                    .dns_names = in.at("dns_names").get<std::vector<std::string>>(),
                    .ip_addresses = in.at("ip_addresses").get<std::vector<std::string>>(),
                    .renewed_at = in.value("renewed_at", UnixSeconds{0})};
  for (const auto& certificate : in.at("certificates")) {
    agent.certificates.push_back({.serial = certificate.at("serial").get<std::string>(),
                                  .not_before = certificate.value("not_before", UnixSeconds{0}),
                                  .not_after = certificate.at("not_after").get<UnixSeconds>()});
  }
  return agent;
}

/// A record file, or nothing when it is missing or unreadable (a torn or foreign file names
/// no token and no agent: it grants nothing).
std::optional<json> read_record(const fs::path& path) {
  try {
    const auto text = read_file(path);
    if (!text) {
      return std::nullopt;
    }
    auto parsed = json::parse(*text, nullptr, false);
    return parsed.is_object() ? std::optional(std::move(parsed)) : std::nullopt;
  } catch (const DurableFileError&) {
    return std::nullopt;
  }
}

std::string serialize(const json& value) {
  return value.dump(2) + "\n";
}

std::string read_text(const fs::path& path) {
  auto text = read_file(path);
  if (!text) {
    throw DurableFileError(path.string() + " is missing");
  }
  return *text;
}

}  // namespace garm_edge::hub
