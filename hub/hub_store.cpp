#include "hub/hub_store.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include "common/durable_file.hpp"
#include "common/hex.hpp"
#include "net/pki.hpp"
#include "net/random.hpp"
#include "net/secret_token.hpp"
#include "wire/join_token.hpp"

namespace garm_edge::hub {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

json to_json(const TokenRecord& token) {
  return {{"id", token.id},
          {"secret_sha256", token.secret_sha256},
          {"created_at", token.created_at},
          {"expires_at", token.expires_at},
          {"uses_left", token.uses_left},
          {"labels", token.labels}};
}

TokenRecord token_from_json(const json& in) {
  return {.id = in.at("id").get<std::string>(),
          .secret_sha256 = in.at("secret_sha256").get<std::string>(),
          .created_at = in.at("created_at").get<UnixSeconds>(),
          .expires_at = in.at("expires_at").get<UnixSeconds>(),
          .uses_left = in.at("uses_left").get<unsigned>(),
          .labels = in.at("labels").get<std::vector<std::string>>()};
}

json to_json(const AgentRecord& agent) {
  json certificates = json::array();
  for (const auto& certificate : agent.certificates) {
    certificates.push_back({{"serial", certificate.serial}, {"not_after", certificate.not_after}});
  }
  return {{"name", agent.name},
          {"labels", agent.labels},
          {"enrolled_at", agent.enrolled_at},
          {"token_id", agent.token_id},
          {"certificates", certificates},
          {"dns_names", agent.dns_names},
          {"ip_addresses", agent.ip_addresses}};
}

AgentRecord agent_from_json(const json& in) {
  AgentRecord agent{.name = in.at("name").get<std::string>(),
                    .labels = in.at("labels").get<std::vector<std::string>>(),
                    .enrolled_at = in.at("enrolled_at").get<UnixSeconds>(),
                    .token_id = in.at("token_id").get<std::string>(),
                    .certificates = {},
                    .dns_names = in.at("dns_names").get<std::vector<std::string>>(),
                    .ip_addresses = in.at("ip_addresses").get<std::vector<std::string>>()};
  for (const auto& certificate : in.at("certificates")) {
    agent.certificates.push_back({.serial = certificate.at("serial").get<std::string>(),
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

template <class Record, class Parse>
std::vector<Record> read_records(const fs::path& directory, Parse parse) {
  std::vector<Record> records;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(directory, error)) {
    if (entry.path().extension() != ".json") {
      continue;
    }
    if (const auto record = read_record(entry.path())) {
      try {
        records.push_back(parse(*record));
      } catch (const json::exception&) {
        // unreadable: grants nothing
      }
    }
  }
  return records;
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

}  // namespace

std::string agent_uri(const std::string& name) {
  return std::string(kAgentUriPrefix) + name;
}

bool AgentRecord::accepts(const std::string& serial, UnixSeconds now) const {
  return std::any_of(certificates.begin(), certificates.end(), [&](const auto& certificate) {
    return certificate.serial == serial && certificate.not_after > now;
  });
}

HubStore::HubStore(fs::path directory) : directory_(std::move(directory)) {
  if (!fs::exists(pki() / "ca.crt") || !fs::exists(pki() / "ca.key")) {
    throw DurableFileError(directory_.string() +
                           " holds no hub (no pki/ca.crt): run garm-edge-hub init first");
  }
  make_private_directory(directory_ / "tokens");
  make_private_directory(directory_ / "agents");
}

void HubStore::init(const fs::path& directory, const InitOptions& options) {
  make_private_directory(directory);
  net::pki_init({.directory = directory / "pki",
                 .agent_dns_names = options.dns_names,
                 .agent_ip_addresses = options.ip_addresses,
                 .client_name = options.client_name,
                 .server_file_stem = "hub",
                 .server_common_name = "garm-edge-hub"});
  make_private_directory(directory / "tokens");
  make_private_directory(directory / "agents");
}

UniqueFd HubStore::lock() const {
  UniqueFd fd(::open((directory_ / "lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  if (fd.get() < 0 || ::flock(fd.get(), LOCK_EX) != 0) {
    throw DurableFileError("cannot lock " + (directory_ / "lock").string() + ": " +
                           std::strerror(errno));
  }
  return fd;
}

std::pair<TokenRecord, std::string> HubStore::create_token(std::chrono::seconds lifetime,
                                                           unsigned uses,
                                                           std::vector<std::string> labels,
                                                           UnixSeconds now) {
  std::array<unsigned char, 8> id_bytes{};
  net::random_bytes(id_bytes);
  auto secret = net::random_token();
  TokenRecord token{.id = to_hex(id_bytes),
                    .secret_sha256 = net::sha256_hex(secret),
                    .created_at = now,
                    .expires_at = now + lifetime.count(),
                    .uses_left = uses,
                    .labels = std::move(labels)};
  const auto held = lock();
  write_atomically(directory_ / "tokens" / (token.id + ".json"), serialize(to_json(token)));
  return {token, secret};
}

std::vector<TokenRecord> HubStore::tokens() const {
  return read_records<TokenRecord>(directory_ / "tokens", token_from_json);
}

bool HubStore::revoke_token(const std::string& id) {
  if (!wire::is_token_id(id)) {
    return false;
  }
  const auto held = lock();
  return fs::remove(directory_ / "tokens" / (id + ".json"));
}

Enrolled HubStore::enrol(const EnrolmentRequest& request, UnixSeconds now) {
  if (!wire::is_token_id(request.token_id)) {
    throw Refused("the token is malformed");
  }
  if (!is_agent_name(request.name)) {
    throw Refused("the agent name must be 1-64 of [A-Za-z0-9._-], starting with a letter or digit");
  }
  const auto held = lock();
  const auto path = directory_ / "tokens" / (request.token_id + ".json");
  const auto record = read_record(path);
  if (!record) {
    throw Refused("token " + request.token_id + " is unknown or was revoked");
  }
  auto token = token_from_json(*record);
  // The secret is checked before anything about the token is told: a guess learns nothing.
  if (!net::constant_time_equal(net::sha256_hex(request.secret), token.secret_sha256)) {
    throw Refused("token " + request.token_id + ": wrong secret");
  }
  if (token.expires_at <= now) {
    throw Refused("token " + request.token_id + " expired");
  }
  if (token.uses_left == 0) {
    throw Refused("token " + request.token_id + " is used up");
  }
  if (fs::exists(directory_ / "agents" / (request.name + ".json"))) {
    throw Refused("an agent named \"" + request.name +
                  "\" is enrolled already: remove it at the hub first (garm-edge-hub remove " +
                  request.name + ")");
  }
  auto enrolled = sign(AgentRecord{.name = request.name,
                                   .labels = token.labels,
                                   .enrolled_at = now,
                                   .token_id = token.id,
                                   .certificates = {},
                                   .dns_names = request.dns_names,
                                   .ip_addresses = request.ip_addresses},
                       request.request_pem);
  --token.uses_left;
  write_atomically(path, serialize(to_json(token)));
  write_agent(enrolled.agent);
  return enrolled;
}

Enrolled HubStore::renew(const std::string& name, const std::string& serial,
                         const std::string& request_pem, UnixSeconds now) {
  const auto held = lock();
  auto current = agent(name);
  if (!current || !current->accepts(serial, now)) {
    throw Refused("agent \"" + name + "\" is not enrolled with this certificate");
  }
  // Certificates that expired are forgotten; the one shown stays until it expires too.
  std::erase_if(current->certificates,
                [now](const IssuedCertificate& issued) { return issued.not_after <= now; });
  auto renewed = sign(std::move(*current), request_pem);
  write_agent(renewed.agent);
  return renewed;
}

Enrolled HubStore::sign(AgentRecord agent, const std::string& request_pem) const {
  std::string certificate;
  try {
    certificate = net::pki_sign_request(pki(), request_pem,
                                        {.common_name = agent.name,
                                         .dns_names = agent.dns_names,
                                         .ip_addresses = agent.ip_addresses,
                                         .uri_names = {agent_uri(agent.name)},
                                         .server_auth = true,
                                         .client_auth = true,
                                         .validity_days = kAgentCertificateDays});
  } catch (const net::PkiError& e) {
    throw Refused(e.what());
  }
  const auto facts = net::certificate_facts(certificate);
  agent.certificates.push_back({.serial = facts.serial, .not_after = facts.not_after_unix});
  return {.agent = std::move(agent), .certificate_pem = certificate, .ca_pem = ca_pem()};
}

void HubStore::write_agent(const AgentRecord& agent) const {
  write_atomically(directory_ / "agents" / (agent.name + ".json"), serialize(to_json(agent)));
}

bool HubStore::remove(const std::string& name) {
  if (!is_agent_name(name)) {
    return false;
  }
  const auto held = lock();
  const bool removed = fs::remove(directory_ / "agents" / (name + ".json"));
  fsync_directory(directory_ / "agents");
  return removed;
}

std::vector<AgentRecord> HubStore::agents() const {
  auto agents = read_records<AgentRecord>(directory_ / "agents", agent_from_json);
  std::sort(agents.begin(), agents.end(),
            [](const auto& a, const auto& b) { return a.name < b.name; });
  return agents;
}

std::optional<AgentRecord> HubStore::agent(const std::string& name) const {
  if (!is_agent_name(name)) {
    return std::nullopt;
  }
  const auto record = read_record(directory_ / "agents" / (name + ".json"));
  try {
    return record ? std::optional(agent_from_json(*record)) : std::nullopt;
  } catch (const json::exception&) {
    return std::nullopt;
  }
}

std::uint64_t HubStore::agents_generation() const {
  // The directory's change time moves with every rename into it and every removal; with
  // nanoseconds two changes in one second still differ.
  struct stat info {};
  if (::stat((directory_ / "agents").c_str(), &info) != 0) {
    return 0;
  }
  return static_cast<std::uint64_t>(info.st_ctim.tv_sec) * 1000000000ULL +
         static_cast<std::uint64_t>(info.st_ctim.tv_nsec);
}

std::string HubStore::ca_pem() const {
  return read_text(pki() / "ca.crt");
}

std::string HubStore::ca_fingerprint() const {
  return net::certificate_facts(ca_pem()).fingerprint_sha256;
}

}  // namespace garm_edge::hub
