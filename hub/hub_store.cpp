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
#include "common/text.hpp"
#include "common/unix_time.hpp"
#include "hub/hub_records.hpp"
#include "hub/hub_state.hpp"
#include "net/pki.hpp"
#include "net/random.hpp"
#include "net/secret_token.hpp"
#include "wire/identity.hpp"
#include "wire/join_token.hpp"

namespace garm_edge::hub {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

using Strings = std::vector<std::string>;

/// Every name of `asked` is among `granted`.
bool within(const Strings& asked, const Strings& granted) {
  return std::all_of(asked.begin(), asked.end(), [&](const auto& name) {
    return std::find(granted.begin(), granted.end(), name) != granted.end();
  });
}

std::string joined(const Strings& names) {
  std::string text;
  for (const auto& name : names) {
    text += (text.empty() ? "" : ", ") + name;
  }
  return text.empty() ? "none" : text;
}

/// `directory` once it holds a hub's CA.
fs::path hub_directory(fs::path directory) {
  if (!fs::exists(directory / "pki" / "ca.crt") || !fs::exists(directory / "pki" / "ca.key")) {
    throw DurableFileError(directory.string() +
                           " holds no hub (no pki/ca.crt): run garm-edge-hub init first");
  }
  return directory;
}

}  // namespace

std::string agent_uri(const std::string& name) {
  return wire::role_uri(wire::Role::host, name);
}

bool AgentRecord::accepts(const std::string& serial, UnixSeconds now) const {
  return std::any_of(certificates.begin(), certificates.end(), [&](const auto& certificate) {
    return certificate.serial == serial && certificate.not_after > now;
  });
}

HubStore::HubStore(fs::path directory, CertificatePolicy policy, std::unique_ptr<HubState> state)
    : directory_(hub_directory(std::move(directory))), policy_(policy), state_(std::move(state)) {}

HubStore::HubStore(fs::path directory, CertificatePolicy policy)
    : HubStore(directory, policy, open_file_state(hub_directory(directory))) {}

HubStore::~HubStore() = default;
HubStore::HubStore(HubStore&&) noexcept = default;
HubStore& HubStore::operator=(HubStore&&) noexcept = default;

void HubStore::init(const fs::path& directory, const InitOptions& options) {
  make_private_directory(directory);
  auto dns_names = options.dns_names;
  // A provider beside the hub calls it as localhost (docs/fleet.md's [[hubs]] url).
  if (std::find(dns_names.begin(), dns_names.end(), "localhost") == dns_names.end()) {
    dns_names.emplace_back("localhost");
  }
  net::pki_init({.directory = directory / "pki",
                 .agent_dns_names = dns_names,
                 .agent_ip_addresses = options.ip_addresses,
                 .client_name = options.client_name,
                 .server_file_stem = "hub",
                 .server_common_name = std::string(wire::kHubCommonName),
                 .server_uri_names = {wire::role_uri(wire::Role::hub, wire::kHubCommonName)},
                 .client_uri_names = {wire::role_uri(wire::Role::client, options.client_name)}});
  make_private_directory(directory / "tokens");
  make_private_directory(directory / "agents");
  HubStore(directory).prepare_to_serve(unix_now());
}

void HubStore::reserve_client_names(std::vector<std::string> identities) {
  reserved_names_ = std::move(identities);
}

std::optional<std::string> HubStore::reserved(const std::string& name, StateReader& records) const {
  const auto lowered = ascii_lower(name);
  if (lowered == wire::kHubCommonName) {
    return "\"" + name + "\" is the hub's own name";
  }
  for (const auto& identity : reserved_names_) {
    if (ascii_lower(identity) == lowered) {
      return "\"" + name + "\" is a client of the hub ([[clients]] identity " + identity + ")";
    }
  }
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(pki() / "clients", error)) {
    if (entry.path().extension() == ".crt" &&
        ascii_lower(entry.path().stem().string()) == lowered) {
      return "\"" + name + "\" is a client certificate's name (" + entry.path().string() + ")";
    }
  }
  // Issued at another hub of the same database: its files are on that hub's machine.
  for (const auto& client : records.clients()) {
    if (ascii_lower(client.name) == lowered) {
      return "\"" + name + "\" is a client certificate's name (issued " +
             std::to_string(client.issued_at) + ", serial " + client.serial + ")";
    }
  }
  // A revoked client's name stays taken while its certificate could still be shown: agents of
  // an older version match clients by CN.
  for (const auto& record : records.revocations().records) {
    if (ascii_lower(record.holder) == "client " + lowered) {
      return "\"" + name + "\" is a revoked client's name";
    }
  }
  return std::nullopt;
}

std::pair<TokenRecord, std::string> HubStore::create_token(std::chrono::seconds lifetime,
                                                           unsigned uses,
                                                           std::vector<std::string> labels,
                                                           HostNames host, UnixSeconds now) {
  check_host_names(host);
  if (host.fixes_name() && uses != 1) {
    throw Refused("a token for one host name has one use");
  }
  std::array<unsigned char, 8> id_bytes{};
  net::random_bytes(id_bytes);
  auto secret = net::random_token();
  TokenRecord token{.id = to_hex(id_bytes),
                    .secret_sha256 = net::sha256_hex(secret),
                    .created_at = now,
                    .expires_at = now + lifetime.count(),
                    .uses_left = uses,
                    .labels = std::move(labels),
                    .host = std::move(host)};
  state_->change([&](StateChange& change) {
    if (token.host.fixes_name()) {
      if (const auto why = reserved(token.host.name, change)) {
        throw Refused("no host may be named so: " + *why);
      }
      if (change.agent(token.host.name)) {
        throw Refused("host \"" + token.host.name + "\" is enrolled already: remove it first");
      }
    }
    change.put_token(token);
  });
  return {token, secret};
}

std::vector<TokenRecord> HubStore::tokens() const {
  return state_->tokens();
}

bool HubStore::revoke_token(const std::string& id) {
  if (!wire::is_token_id(id)) {
    return false;
  }
  bool removed = false;
  state_->change([&](StateChange& change) { removed = change.remove_token(id); });
  return removed;
}

Enrolled HubStore::enrol(const EnrolmentRequest& request, UnixSeconds now) {
  if (!wire::is_token_id(request.token_id)) {
    throw Refused("the token is malformed");
  }
  if (!request.name.empty() && !is_agent_name(request.name)) {
    throw Refused("the agent name must be 1-64 of [A-Za-z0-9._-], starting with a letter or digit");
  }
  Enrolled enrolled;
  state_->change([&](StateChange& change) {
    auto token = change.token(request.token_id);
    if (!token) {
      throw Refused("token " + request.token_id + " is unknown or was revoked");
    }
    // The secret is checked before anything about the token is told: a guess learns nothing.
    if (!net::constant_time_equal(net::sha256_hex(request.secret), token->secret_sha256)) {
      throw Refused("token " + request.token_id + ": wrong secret");
    }
    if (token->expires_at <= now) {
      throw Refused("token " + request.token_id + " expired");
    }
    if (token->uses_left == 0) {
      throw Refused("token " + request.token_id + " is used up");
    }
    enrolled = sign(grant(*token, request, now, change), request.request_pem);
    --token->uses_left;
    change.put_token(*token);  // the use first: a failure after it wastes a use, never gives one
    change.put_agent(enrolled.agent);
  });
  return enrolled;
}

AgentRecord HubStore::grant(const TokenRecord& token, const EnrolmentRequest& request,
                            UnixSeconds now, StateReader& records) const {
  const auto& host = token.host;
  const auto name = request.name.empty() ? host.name : request.name;
  if (name.empty()) {
    throw Refused("this token names no host: join with the agent's name");
  }
  if (!host.admits(name)) {
    throw Refused("token " + token.id + " is for " + host.describe() + ", not \"" + name +
                  "\": the operator chooses a host's name (set [agent] id, or ask for a token "
                  "for this name)");
  }
  if (const auto why = reserved(name, records)) {
    throw Refused("no host may be named so: " + *why);
  }
  if (!within(request.dns_names, host.dns_names) ||
      !within(request.ip_addresses, host.ip_addresses)) {
    throw Refused("token " + token.id + " grants the DNS names " + joined(host.dns_names) +
                  " and the addresses " + joined(host.ip_addresses) +
                  " only: a host's names are the operator's to give (garm-edge-hub token create "
                  "--name NAME --dns DNS --ip ADDR)");
  }
  if (records.agent(name)) {
    throw Refused("an agent named \"" + name +
                  "\" is enrolled already: remove it at the hub first (garm-edge-hub remove " +
                  name + ")");
  }
  return AgentRecord{.name = name,
                     .labels = token.labels,
                     .enrolled_at = now,
                     .token_id = token.id,
                     .certificates = {},
                     .dns_names = host.dns_names,
                     .ip_addresses = host.ip_addresses,
                     .renewed_at = 0};
}

Enrolled HubStore::renew(const std::string& name, const std::string& serial,
                         const std::string& request_pem, UnixSeconds now) {
  Enrolled renewed;
  state_->change([&](StateChange& change) {
    auto current = change.agent(name);
    if (!current || !current->accepts(serial, now)) {
      throw Refused("agent \"" + name + "\" is not enrolled with this certificate");
    }
    const auto shown = std::find_if(current->certificates.begin(), current->certificates.end(),
                                    [&](const auto& issued) { return issued.serial == serial; });
    // The certificate's own life, as the agent reckons it (not_before is an hour back); one
    // recorded before the hub kept not_before: the policy's.
    const auto lifetime = shown->not_before > 0 ? shown->not_after - shown->not_before
                                                : std::int64_t{policy_.host_days} * 86400 + 3600;
    const auto due_at = shown->not_after - static_cast<UnixSeconds>(static_cast<double>(lifetime) *
                                                                    policy_.renewal_window);
    if (now < due_at) {
      throw Refused("this certificate is not due for renewal for " +
                    std::to_string((due_at - now + 3599) / 3600) +
                    " more hour(s): the hub renews once less than " +
                    std::to_string(static_cast<int>(policy_.renewal_window * 100)) +
                    " % of its life is left");
    }
    if (const auto next = current->renewed_at + policy_.min_renewal_interval.count(); now < next) {
      throw Refused("agent \"" + name + "\" renewed " + std::to_string(now - current->renewed_at) +
                    " s ago: at most one renewal per " +
                    std::to_string(policy_.min_renewal_interval.count()) + " s");
    }
    // The new certificate and the one shown stay accepted; any other (a copy of an older key
    // still renewing, say) is revoked here and in the CRL.
    std::vector<RevokedRecord> dropped;
    const auto kept_shown = *shown;
    for (const auto& issued : current->certificates) {
      if (issued.serial != serial && issued.not_after > now) {
        dropped.push_back({.serial = issued.serial,
                           .holder = "host " + name,
                           .not_after = issued.not_after,
                           .revoked_at = now});
      }
    }
    current->certificates = {kept_shown};
    current->renewed_at = now;
    renewed = sign(std::move(*current), request_pem);
    // Revoked before the record forgets them: a failure in between leaves them accepted and
    // revoked (refused), never forgotten and still trusted on the direct path.
    if (!dropped.empty()) {
      revoke(dropped, now, change);
    }
    change.put_agent(renewed.agent);
  });
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
                                         .validity_days = policy_.host_days});
  } catch (const net::PkiError& e) {
    throw Refused(e.what());
  }
  const auto facts = net::certificate_facts(certificate);
  agent.certificates.push_back({.serial = facts.serial,
                                .not_before = facts.not_before_unix,
                                .not_after = facts.not_after_unix});
  return {.agent = std::move(agent), .certificate_pem = certificate, .ca_pem = ca_pem()};
}

net::IssuedFiles HubStore::issue_client(const std::string& name, wire::Role role) {
  if (role != wire::Role::client && role != wire::Role::metrics) {
    throw Refused("issue-client makes client and metrics certificates only");
  }
  net::IssuedFiles issued;
  state_->change([&](StateChange& change) {
    const auto lowered = ascii_lower(name);
    const auto hosts = change.agents();
    if (lowered == wire::kHubCommonName ||
        std::any_of(hosts.begin(), hosts.end(),
                    [&](const auto& host) { return ascii_lower(host.name) == lowered; })) {
      throw Refused("\"" + name + "\" is a host's or the hub's name: a client needs its own");
    }
    for (const auto& token : change.tokens()) {
      if (token.host.fixes_name() && ascii_lower(token.host.name) == lowered) {
        throw Refused("token " + token.id + " is for host \"" + name +
                      "\": a client needs its own name");
      }
    }
    const auto clients = change.clients();
    if (std::any_of(clients.begin(), clients.end(),
                    [&](const auto& client) { return ascii_lower(client.name) == lowered; })) {
      throw Refused("a client certificate named \"" + name +
                    "\" is issued already (perhaps at another hub): revoke-client it first");
    }
    try {
      issued = net::pki_issue_client(pki(), name, {wire::role_uri(role, name)});
    } catch (const net::PkiError& e) {
      throw Refused(e.what());
    }
    const auto facts = net::certificate_facts(read_text(issued.certificate));
    change.put_client({.name = name,
                       .role = std::string(wire::to_string(role)),
                       .serial = facts.serial,
                       .not_after = facts.not_after_unix,
                       .issued_at = facts.not_before_unix});
  });
  return issued;
}

std::vector<AgentRecord> HubStore::agents() const {
  return state_->agents();
}

std::optional<AgentRecord> HubStore::agent(const std::string& name) const {
  return state_->agent(name);
}

std::uint64_t HubStore::agents_generation() const {
  return state_->agents_generation();
}

std::string HubStore::ca_pem() const {
  return read_text(pki() / "ca.crt");
}

std::string HubStore::ca_fingerprint() const {
  return net::certificate_facts(ca_pem()).fingerprint_sha256;
}

}  // namespace garm_edge::hub
