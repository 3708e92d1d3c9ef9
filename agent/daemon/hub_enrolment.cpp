#include "agent/daemon/hub_enrolment.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "common/durable_file.hpp"
#include "common/unix_time.hpp"
#include "net/https_client.hpp"
#include "net/pki.hpp"
#include "wire/identity.hpp"
#include "wire/join_token.hpp"

namespace garm_edge::agent {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string required_text(const fs::path& path) {
  auto text = read_file(path);
  if (!text) {
    throw JoinError(path.string() + " is missing");
  }
  return *text;
}

/// Present once the hub has shown a certificate with the hub's role.
fs::path hub_role_seen_marker(const fs::path& enrolment_directory) {
  return enrolment_directory / "hub-role-seen";
}

/// The hub's error message from a refusal, or the status when it gave none.
std::string refusal(const net::HttpsResponse& response) {
  const auto body = json::parse(response.body, nullptr, false);
  if (body.is_object() && body.contains("message") && body["message"].is_string()) {
    return body["message"].get<std::string>();
  }
  return "HTTP " + std::to_string(response.status);
}

/// The certificate and its key in one file, replaced in one rename: a reader (a dial while a
/// renewal runs, or the agent after a crash) sees the old pair or the new one, never a mix.
void install_credentials(const HubEnrolment& enrolment, const std::string& key_pem,
                         const std::string& certificate_pem) {
  write_atomically(enrolment.certificate(), certificate_pem + key_pem);
}

/// Run as root (as an operator types it), join writes files the agent's own account must read:
/// they go to the owner of the state directory.
void give_to_state_owner(const fs::path& state_dir, const fs::path& directory) {
  struct stat owner {};
  if (::geteuid() != 0 || ::stat(state_dir.c_str(), &owner) != 0 || owner.st_uid == 0) {
    return;
  }
  for (const auto& path : {directory, directory / "ca.crt", directory / "agent.pem",
                           directory / "hub.json", hub_role_seen_marker(directory)}) {
    if (::chown(path.c_str(), owner.st_uid, owner.st_gid) != 0 && errno != ENOENT) {
      throw JoinError("cannot give " + path.string() +
                      " to the agent's account: " + std::strerror(errno));
    }
  }
}

}  // namespace

net::PeerCheck hub_peer(fs::path enrolment_directory) {
  return [marker = hub_role_seen_marker(enrolment_directory)](
             const net::PeerIdentity& peer) -> std::optional<std::string> {
    if (auto refusal = wire::refusal_as_hub(peer.uri_names, peer.common_name)) {
      return refusal;
    }
    std::error_code error;
    if (wire::role_claims(peer.uri_names).empty()) {
      if (fs::exists(marker, error)) {
        return "a certificate that claims no role, and this hub has shown the hub's role "
               "before (its certificate from before roles is revoked)";
      }
      return std::nullopt;
    }
    if (!fs::exists(marker, error) && fs::exists(marker.parent_path(), error)) {
      try {
        write_atomically(marker, "");
      } catch (const std::exception&) {
        // Remembered on a later connection.
      }
    }
    return std::nullopt;
  };
}

fs::path hub_directory(const fs::path& state_dir) {
  return state_dir / "hub";
}

fs::path hub_crl_path(const fs::path& state_dir) {
  return HubEnrolment{
      .directory = hub_directory(state_dir), .hub_url = {}, .name = {}, .labels = {}}
      .crl();
}

std::shared_ptr<const net::TlsConfig> HubEnrolment::client_tls(bool with_crl) const {
  // The hub's CRL as last fetched: a hub certificate revoked since commands nothing.
  return net::TlsConfig::load(
      net::TlsConfig::Role::client,
      {.ca = ca(),
       .crl = "",
       .certificate = certificate(),
       .key = key(),
       .crls_when_present = with_crl ? std::vector{crl()} : std::vector<fs::path>{}});
}

HubEnrolment::Validity HubEnrolment::validity(std::int64_t now_unix) const {
  const auto facts = net::certificate_facts(required_text(certificate()));
  return {.remaining = facts.not_after_unix - now_unix,
          .lifetime = facts.not_after_unix - facts.not_before_unix};
}

std::optional<std::vector<std::string>> parse_hub_urls(const std::string& body) {
  const auto parsed = json::parse(body, nullptr, false);
  if (!parsed.is_object() || !parsed.contains("hubs") || !parsed["hubs"].is_array()) {
    return std::nullopt;
  }
  std::vector<std::string> urls;
  for (const auto& url : parsed["hubs"]) {
    if (!url.is_string() || url.get_ref<const std::string&>().size() > 1024) {
      return std::nullopt;
    }
    try {
      // The host goes into a Host header, SNI and the logs: a name or an address, nothing else.
      const auto target = net::parse_https_url(url.get<std::string>());
      if (target.host.empty() ||
          target.host.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                        "0123456789.-:[]") != std::string::npos) {
        return std::nullopt;
      }
    } catch (const std::exception&) {
      return std::nullopt;
    }
    if (std::find(urls.begin(), urls.end(), url.get<std::string>()) == urls.end() &&
        urls.size() < kMaxHubs) {
      urls.push_back(url.get<std::string>());
    }
  }
  if (urls.empty()) {
    return std::nullopt;
  }
  return urls;
}

std::vector<std::string> HubEnrolment::hub_urls() const {
  // The URL joined stays first: it is how this host reached a hub of the fleet, whatever
  // names the hubs give themselves.
  std::vector<std::string> urls{hub_url};
  if (const auto text = read_file(hubs_file())) {
    for (auto& url : parse_hub_urls(*text).value_or(std::vector<std::string>{})) {
      if (std::find(urls.begin(), urls.end(), url) == urls.end() && urls.size() < kMaxHubs) {
        urls.push_back(std::move(url));
      }
    }
  }
  return urls;
}

void save_hub_urls(const HubEnrolment& enrolment, const std::vector<std::string>& urls) {
  write_atomically(enrolment.hubs_file(), json({{"hubs", urls}}).dump(2) + "\n", 0644);
}

std::optional<HubEnrolment> load_hub_enrolment(const fs::path& state_dir) {
  const auto directory = hub_directory(state_dir);
  const auto text = read_file(directory / "hub.json");
  if (!text) {
    return std::nullopt;
  }
  const auto fields = json::parse(*text, nullptr, false);
  try {
    return HubEnrolment{.directory = directory,
                        .hub_url = fields.at("hub_url").get<std::string>(),
                        .name = fields.at("name").get<std::string>(),
                        .labels = fields.at("labels").get<std::vector<std::string>>()};
  } catch (const json::exception&) {
    throw JoinError((directory / "hub.json").string() + " is not an enrolment this agent wrote");
  }
}

HubEnrolment join_hub(const JoinOptions& options) {
  const auto token = wire::JoinToken::decode(options.token);
  if (!token) {
    throw JoinError("the join token is malformed (copy it whole, as garm-edge-hub printed it)");
  }
  if (load_hub_enrolment(options.state_dir)) {
    throw JoinError("this agent is enrolled already (" +
                    (hub_directory(options.state_dir) / "hub.json").string() +
                    "); remove that directory to join again");
  }
  const auto target = net::parse_https_url(token->hub_url);
  const net::HttpsClientOptions client_options{.connect_timeout = options.timeout,
                                               .request_timeout = options.timeout,
                                               .session_file = {},
                                               .deadline = std::nullopt,
                                               .check_peer = [](const net::PeerIdentity& peer) {
                                                 return wire::refusal_as_hub(peer.uri_names,
                                                                             peer.common_name);
                                               }};
  // The hub's role counts only from the enrolment's connection, which trusts the CA alone (the
  // first one trusts nothing).
  auto role_seen = std::make_shared<bool>(false);
  auto enrol_options = client_options;
  enrol_options.check_peer = [role_seen](const net::PeerIdentity& peer) {
    *role_seen = *role_seen || !wire::role_claims(peer.uri_names).empty();
    return wire::refusal_as_hub(peer.uri_names, peer.common_name);
  };
  // The first connection trusts nothing: what it fetches is checked against the token.
  const auto ca = net::HttpsClient(target, net::TlsConfig::client_unverified(), client_options)
                      .request("GET", "/v1/ca");
  if (ca.status != 200) {
    throw JoinError("the hub at " + token->hub_url + " did not give its CA: " + refusal(ca));
  }
  const auto fingerprint = net::certificate_facts(ca.body).fingerprint_sha256;
  if (fingerprint != token->ca_fingerprint) {
    throw JoinError("the hub at " + token->hub_url + " shows a CA with fingerprint " + fingerprint +
                    ", not the token's " + token->ca_fingerprint +
                    ": not the hub that made the token, or someone in between");
  }
  auto credentials = net::pki_make_request(options.name);
  const json body = {{"token_id", token->id},          {"secret", token->secret},
                     {"name", options.name},           {"request", credentials.request_pem},
                     {"dns_names", options.dns_names}, {"ip_addresses", options.ip_addresses}};
  const auto answer =
      net::HttpsClient(target, net::TlsConfig::client_trusting(ca.body, {}), enrol_options)
          .request("POST", "/v1/enrol", body.dump());
  if (answer.status != 200) {
    throw JoinError("the hub refused the enrolment: " + refusal(answer));
  }
  const auto issued = json::parse(answer.body, nullptr, false);
  if (!issued.is_object() || !issued.contains("certificate") ||
      !issued["certificate"].is_string()) {
    throw JoinError("the hub's answer holds no certificate");
  }
  HubEnrolment enrolment{.directory = hub_directory(options.state_dir),
                         .hub_url = token->hub_url,
                         .name = options.name,
                         .labels = issued.value("labels", std::vector<std::string>{})};
  make_private_directory(options.state_dir);
  make_private_directory(enrolment.directory);
  write_atomically(enrolment.ca(), ca.body);
  if (*role_seen) {
    write_atomically(hub_role_seen_marker(enrolment.directory), "");
  }
  install_credentials(enrolment, credentials.key_pem, issued["certificate"].get<std::string>());
  if (issued.contains("hubs")) {
    if (const auto hubs = parse_hub_urls(json({{"hubs", issued["hubs"]}}).dump())) {
      save_hub_urls(enrolment, *hubs);
    }
  }
  // hub.json last: until it exists, nothing counts as enrolled.
  write_atomically(enrolment.directory / "hub.json", json({{"hub_url", enrolment.hub_url},
                                                           {"name", enrolment.name},
                                                           {"labels", enrolment.labels},
                                                           {"ca_fingerprint", fingerprint},
                                                           {"enrolled_at", unix_now()}})
                                                             .dump(2) +
                                                         "\n");
  give_to_state_owner(options.state_dir, enrolment.directory);
  return enrolment;
}

std::vector<std::string> hubs_in_asking_order(const std::vector<std::string>& fleet,
                                              const std::vector<std::string>& reachable_first) {
  std::vector<std::string> order;
  for (const auto& url : reachable_first) {
    if (std::find(fleet.begin(), fleet.end(), url) != fleet.end() &&
        std::find(order.begin(), order.end(), url) == order.end()) {
      order.push_back(url);
    }
  }
  for (const auto& url : fleet) {
    if (std::find(order.begin(), order.end(), url) == order.end()) {
      order.push_back(url);
    }
  }
  return order;
}

namespace {

/// One request to the fleet's hubs as the enrolled host, with `tls` (its client_tls()): to the
/// first hub that answers, those `reachable_first` before the rest, so one dead hub stops
/// neither renewal nor the CRL, and a silent one costs no dial timeout while another is known
/// to answer.
net::HttpsResponse ask_hub(const HubEnrolment& enrolment, std::shared_ptr<const net::TlsConfig> tls,
                           std::chrono::milliseconds timeout,
                           const std::vector<std::string>& reachable_first,
                           const std::string& method, const std::string& path,
                           const std::string& body = "") {
  std::string errors;
  for (const auto& url : hubs_in_asking_order(enrolment.hub_urls(), reachable_first)) {
    try {
      return net::HttpsClient(net::parse_https_url(url), tls,
                              {.connect_timeout = timeout,
                               .request_timeout = timeout,
                               .session_file = {},
                               .deadline = std::nullopt,
                               .check_peer = hub_peer(enrolment.directory)})
          .request(method, path, body);
    } catch (const std::exception& e) {
      errors += (errors.empty() ? "" : "; ") + url + ": " + e.what();
    }
  }
  throw JoinError("no hub answered (" + errors + ")");
}

/// When the CRL the agent holds was issued; nothing without one it can read.
std::optional<std::int64_t> kept_crl_issued_at(const HubEnrolment& enrolment) {
  const auto kept = read_file(enrolment.crl());
  if (!kept) {
    return std::nullopt;
  }
  try {
    return net::pki_check_crl(enrolment.ca(), *kept);
  } catch (const net::PkiError&) {
    return std::nullopt;  // damaged: the hub's replaces it
  }
}

}  // namespace

std::optional<std::string> fetch_hub_crl(const HubEnrolment& enrolment,
                                         std::chrono::milliseconds timeout,
                                         const std::vector<std::string>& reachable_first) {
  // Without the CRL held: an expired or damaged one must not keep the agent from fetching the
  // next (what it fetches is checked against the CA, and must not be older).
  const auto answer =
      ask_hub(enrolment, enrolment.client_tls(false), timeout, reachable_first, "GET", "/v1/crl");
  if (answer.status == 404) {
    return std::nullopt;  // a hub older than revocation
  }
  if (answer.status != 200) {
    throw JoinError("the hub gave no CRL: " + refusal(answer));
  }
  std::int64_t issued = 0;
  try {
    issued = net::pki_check_crl(enrolment.ca(), answer.body);
  } catch (const net::PkiError& e) {
    throw JoinError(e.what());
  }
  // An older CRL than the one kept (from a stale hub, or one replaying what it saved) would
  // take back a revocation.
  if (const auto kept = kept_crl_issued_at(enrolment); kept && issued < *kept) {
    throw JoinError("the hub gave a CRL older than the one this agent holds: kept the newer");
  }
  return answer.body;
}

std::optional<std::vector<std::string>> fetch_hub_urls(
    const HubEnrolment& enrolment, std::chrono::milliseconds timeout,
    const std::vector<std::string>& reachable_first) {
  const auto answer =
      ask_hub(enrolment, enrolment.client_tls(), timeout, reachable_first, "GET", "/v1/hubs");
  if (answer.status == 404) {
    return std::nullopt;  // a hub older than the list: the one joined is the fleet's only hub
  }
  if (answer.status != 200) {
    throw JoinError("the hub gave no list of hubs: " + refusal(answer));
  }
  auto urls = parse_hub_urls(answer.body);
  if (!urls) {
    throw JoinError("the hub's list of hubs is not one");
  }
  return urls;
}

void renew_certificate(const HubEnrolment& enrolment, std::chrono::milliseconds timeout,
                       const std::vector<std::string>& reachable_first) {
  auto credentials = net::pki_make_request(enrolment.name);
  const auto answer = ask_hub(enrolment, enrolment.client_tls(), timeout, reachable_first, "POST",
                              "/v1/renew", json({{"request", credentials.request_pem}}).dump());
  if (answer.status != 200) {
    throw JoinError("the hub refused the renewal: " + refusal(answer));
  }
  const auto issued = json::parse(answer.body, nullptr, false);
  if (!issued.is_object() || !issued.contains("certificate") ||
      !issued["certificate"].is_string()) {
    throw JoinError("the hub's answer holds no certificate");
  }
  install_credentials(enrolment, credentials.key_pem, issued["certificate"].get<std::string>());
  give_to_state_owner(enrolment.directory.parent_path(), enrolment.directory);
}

}  // namespace garm_edge::agent
