#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include "common/durable_file.hpp"
#include "common/unix_time.hpp"
#include "hub/hub_records.hpp"
#include "hub/hub_store.hpp"
#include "net/pki.hpp"

// Revocation in the hub's store: removed agents and revoked clients go into revoked.json and
// a new CRL, which both of the hub's listeners and every agent check.
namespace garm_edge::hub {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

/// revoked.json: the records and the number of the CRL last written from them.
struct RevokedFile {
  std::vector<RevokedRecord> records;
  std::uint64_t crl_number = 0;
};

RevokedFile read_revoked(const fs::path& path) {
  RevokedFile file;
  const auto document = read_record(path);
  if (!document) {
    return file;
  }
  try {
    for (const auto& entry : document->at("certificates")) {
      file.records.push_back(revoked_from_json(entry));
    }
    file.crl_number = document->value("crl_number", std::uint64_t{0});
  } catch (const json::exception&) {
    throw DurableFileError(path.string() + " is damaged");
  }
  return file;
}

}  // namespace

bool HubStore::remove(const std::string& name, UnixSeconds now) {
  if (!is_agent_name(name)) {
    return false;
  }
  const auto held = lock();
  const auto removed = agent(name);
  if (!removed) {
    return false;
  }
  // Revoked first: a crash in between leaves a host that is known and refused, never one that
  // is forgotten and still trusted on the direct path.
  std::vector<RevokedRecord> records;
  for (const auto& issued : removed->certificates) {
    records.push_back({.serial = issued.serial,
                       .holder = "host " + name,
                       .not_after = issued.not_after,
                       .revoked_at = now});
  }
  revoke(records, now);
  fs::remove(directory_ / "agents" / (name + ".json"));
  fsync_directory(directory_ / "agents");
  return true;
}

bool HubStore::revoke_client(const std::string& name, UnixSeconds now) {
  const auto held = lock();
  const auto certificate = pki() / "clients" / (name + ".crt");
  if (!is_agent_name(name) || !fs::exists(certificate)) {
    return false;
  }
  const auto facts = net::certificate_facts(read_text(certificate));
  revoke({{.serial = facts.serial,
           .holder = "client " + name,
           .not_after = facts.not_after_unix,
           .revoked_at = now}},
         now);
  fs::remove(certificate);
  fs::remove(pki() / "clients" / (name + ".key"));
  return true;
}

std::vector<RevokedRecord> HubStore::revoked() const {
  return read_revoked(directory_ / "revoked.json").records;
}

void HubStore::revoke(const std::vector<RevokedRecord>& records, UnixSeconds now) const {
  auto [all, last_number] = read_revoked(directory_ / "revoked.json");
  std::erase_if(all, [now](const auto& record) { return record.not_after <= now; });
  for (const auto& record : records) {
    const bool known = std::any_of(
        all.begin(), all.end(), [&](const auto& other) { return other.serial == record.serial; });
    if (!known && record.not_after > now) {
      all.push_back(record);
    }
  }
  const auto number = last_number + 1;
  json entries = json::array();
  for (const auto& record : all) {
    entries.push_back(to_json(record));
  }
  write_atomically(directory_ / "revoked.json",
                   serialize({{"crl_number", number}, {"certificates", entries}}));
  write_crl(all, number);
}

void HubStore::write_crl(const std::vector<RevokedRecord>& records, std::uint64_t number) const {
  std::vector<net::RevokedCertificate> serials;
  for (const auto& record : records) {
    serials.push_back({.serial = record.serial, .revoked_at_unix = record.revoked_at});
  }
  write_atomically(crl_path(), net::pki_make_crl(pki(), serials, number, policy_.crl_days), 0644);
}

std::string HubStore::crl_pem() const {
  return read_text(crl_path());
}

void HubStore::refresh_crl(UnixSeconds now) {
  struct stat info {};
  if (::stat(crl_path().c_str(), &info) == 0 && info.st_mtim.tv_sec > now - 86400) {
    return;
  }
  const auto held = lock();
  revoke({}, now);
}

void HubStore::prepare_to_serve(UnixSeconds now) {
  refresh_crl(now);
  const auto held = lock();
  const auto facts = net::certificate_facts(read_text(pki() / "hub.crt"));
  const auto claims = wire::role_claims(facts.uri_names);
  if (claims.size() == 1 && claims.front().role == wire::Role::hub) {
    return;
  }
  auto dns_names = facts.dns_names;
  if (std::find(dns_names.begin(), dns_names.end(), "localhost") == dns_names.end()) {
    dns_names.emplace_back("localhost");
  }
  net::pki_reissue_server(pki(), "hub", std::string(wire::kHubCommonName), dns_names,
                          facts.ip_addresses,
                          {wire::role_uri(wire::Role::hub, wire::kHubCommonName)});
  // The old one named no role: passed for the hub by the rule for hubs made before roles.
  revoke({{.serial = facts.serial,
           .holder = "hub (before roles)",
           .not_after = facts.not_after_unix,
           .revoked_at = now}},
         now);
}

}  // namespace garm_edge::hub
