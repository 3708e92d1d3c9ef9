#include <algorithm>
#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include "common/durable_file.hpp"
#include "common/unix_time.hpp"
#include "hub/hub_records.hpp"
#include "hub/hub_state.hpp"
#include "hub/hub_store.hpp"
#include "net/pki.hpp"

// Revocation in the hub's store: removed agents and revoked clients go into the revocations and
// a new CRL, which both of the hub's listeners and every agent check.
namespace garm_edge::hub {
namespace {

namespace fs = std::filesystem;

}  // namespace

bool HubStore::remove(const std::string& name, UnixSeconds now) {
  if (!is_agent_name(name)) {
    return false;
  }
  bool removed = false;
  state_->change([&](StateChange& change) {
    const auto agent = change.agent(name);
    if (!agent) {
      return;
    }
    // Revoked first: a crash in between leaves a host that is known and refused, never one that
    // is forgotten and still trusted on the direct path.
    std::vector<RevokedRecord> records;
    for (const auto& issued : agent->certificates) {
      records.push_back({.serial = issued.serial,
                         .holder = "host " + name,
                         .not_after = issued.not_after,
                         .revoked_at = now});
    }
    revoke(records, now, change);
    removed = change.remove_agent(name);
  });
  return removed;
}

bool HubStore::revoke_client(const std::string& name, UnixSeconds now) {
  bool revoked_now = false;
  state_->change([&](StateChange& change) {
    if (!is_agent_name(name)) {
      return;
    }
    // The record (files: the certificate itself), wherever it was issued; else the certificate
    // here, issued before clients were records.
    auto clients = change.clients();
    const auto certificate = pki() / "clients" / (name + ".crt");
    if (std::none_of(clients.begin(), clients.end(),
                     [&](const auto& issued) { return issued.name == name; }) &&
        fs::exists(certificate)) {
      const auto facts = net::certificate_facts(read_text(certificate));
      clients.push_back(
          {.name = name, .role = {}, .serial = facts.serial, .not_after = facts.not_after_unix});
    }
    const auto client = std::find_if(clients.begin(), clients.end(),
                                     [&](const auto& issued) { return issued.name == name; });
    if (client == clients.end()) {
      return;
    }
    revoke({{.serial = client->serial,
             .holder = "client " + name,
             .not_after = client->not_after,
             .revoked_at = now}},
           now, change);
    change.remove_client(name);
    fs::remove(pki() / "clients" / (name + ".crt"));
    fs::remove(pki() / "clients" / (name + ".key"));
    revoked_now = true;
  });
  return revoked_now;
}

std::vector<RevokedRecord> HubStore::revoked() const {
  return state_->revocations().records;
}

void HubStore::revoke(const std::vector<RevokedRecord>& records, UnixSeconds now,
                      StateChange& change) const {
  auto list = change.revocations();
  std::erase_if(list.records, [now](const auto& record) { return record.not_after <= now; });
  for (const auto& record : records) {
    const bool known =
        std::any_of(list.records.begin(), list.records.end(),
                    [&](const auto& other) { return other.serial == record.serial; });
    if (!known && record.not_after > now) {
      list.records.push_back(record);
    }
  }
  if (list.crl_number == 0) {
    // A database's first CRL: after the one `init` (or the hub before the move) wrote here.
    list.crl_number = open_file_state(directory_)->revocations().crl_number;
  }
  ++list.crl_number;
  list.crl_pem = make_crl(list.records, list.crl_number);
  change.put_revocations(list);
  std::lock_guard lock(crl_written_->mutex);
  write_atomically(crl_path(), list.crl_pem, 0644);
  crl_written_->number = list.crl_number;
}

bool HubStore::sync_crl() {
  const auto list = state_->revocations();
  if (list.crl_pem.empty()) {
    return false;  // files: pki/crl.pem is the state's own
  }
  std::lock_guard lock(crl_written_->mutex);
  if (list.crl_number <= crl_written_->number) {
    return false;
  }
  write_atomically(crl_path(), list.crl_pem, 0644);
  crl_written_->number = list.crl_number;
  return true;
}

std::string HubStore::make_crl(const std::vector<RevokedRecord>& records,
                               std::uint64_t number) const {
  std::vector<net::RevokedCertificate> serials;
  for (const auto& record : records) {
    serials.push_back({.serial = record.serial, .revoked_at_unix = record.revoked_at});
  }
  return net::pki_make_crl(pki(), serials, number, policy_.crl_days);
}

std::string HubStore::crl_pem() const {
  return read_text(crl_path());
}

void HubStore::refresh_crl(UnixSeconds now) {
  struct stat info {};
  if (::stat(crl_path().c_str(), &info) == 0 && info.st_mtim.tv_sec > now - 86400) {
    return;
  }
  state_->change([&](StateChange& change) { revoke({}, now, change); });
}

void HubStore::prepare_to_serve(UnixSeconds now) {
  sync_crl();
  refresh_crl(now);
  state_->change([&](StateChange& change) {
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
           now, change);
  });
}

}  // namespace garm_edge::hub
