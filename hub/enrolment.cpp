#include "hub/enrolment.hpp"

#include <nlohmann/json.hpp>

#include "common/text.hpp"
#include "common/unix_time.hpp"
#include "hub/hub_server.hpp"
#include "hub/json_answer.hpp"
#include "net/pki.hpp"
#include "wire/identity.hpp"
#include "wire/join_token.hpp"

// The agents' enrolment: a join token (or a renewal by the certificate still valid) for a
// certificate the hub signs, with names only the operator chose.
namespace garm_edge::hub {
namespace {

using net::HttpRequest;
using net::HttpResponse;
using nlohmann::json;

constexpr std::size_t kMaxNames = 16;

std::vector<std::string> name_list(const json& body, const char* key) {
  const auto found = body.find(key);
  if (found == body.end()) {
    return {};
  }
  auto names = found->get<std::vector<std::string>>();
  if (names.size() > kMaxNames) {
    throw Refused(std::string(key) + ": at most 16");
  }
  for (const auto& name : names) {
    if (name.empty() || name.size() > 253 ||
        name.find_first_not_of(
            "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-:") !=
            std::string::npos) {
      throw Refused(std::string(key) + ": \"" + printable_excerpt(name) + "\" is not a name");
    }
  }
  return names;
}

}  // namespace

bool EnrolmentLimiter::allowed(const std::string& address,
                               std::chrono::steady_clock::time_point now) {
  std::lock_guard lock(mutex_);
  const auto found = windows_.find(address);
  return found == windows_.end() || now - found->second.start >= std::chrono::minutes(1) ||
         found->second.failures < limit_;
}

void EnrolmentLimiter::failed(const std::string& address,
                              std::chrono::steady_clock::time_point now) {
  std::lock_guard lock(mutex_);
  auto& window = windows_[address];
  if (now - window.start >= std::chrono::minutes(1)) {
    window = {.start = now, .failures = 0};
  }
  ++window.failures;
  while (windows_.size() > kMaxAddresses) {
    windows_.erase(std::min_element(
        windows_.begin(), windows_.end(),
        [](const auto& a, const auto& b) { return a.second.start < b.second.start; }));
  }
}

HttpResponse HubServer::enrol(const HttpRequest& request, const net::PeerIdentity& peer) {
  const auto now = std::chrono::steady_clock::now();
  json body;
  std::string token_id;
  try {
    body = json::parse(request.body);
    token_id = body.at("token_id").get<std::string>();
  } catch (const json::exception&) {
    return error_answer(400, "invalid_argument",
                        "an enrolment is JSON with token_id, secret, name and request");
  }
  // Counted per address and token: hosts behind one NAT share an address, and guesses at one
  // token must not lock them out of another.
  const auto key = peer.address + "|" + (wire::is_token_id(token_id) ? token_id : std::string("?"));
  if (!limiter_.allowed(key, now)) {
    return error_answer(429, "too_many_failures",
                        "too many failed enrolments with this token from this address: wait a "
                        "minute");
  }
  try {
    const EnrolmentRequest enrolment{.token_id = token_id,
                                     .secret = body.at("secret").get<std::string>(),
                                     .name = body.value("name", std::string()),
                                     .request_pem = body.at("request").get<std::string>(),
                                     .dns_names = name_list(body, "dns_names"),
                                     .ip_addresses = name_list(body, "ip_addresses")};
    auto enrolled = store_.enrol(enrolment, unix_now());
    watcher_.note(enrolled.agent);
    log_.info("enrolled agent " + enrolled.agent.name + " from " + peer.address + " with token " +
              enrolled.agent.token_id);
    return json_answer(200, {{"certificate", enrolled.certificate_pem},
                             {"ca", enrolled.ca_pem},
                             {"labels", enrolled.agent.labels},
                             {"name", enrolled.agent.name},
                             {"dns_names", enrolled.agent.dns_names},
                             {"ip_addresses", enrolled.agent.ip_addresses},
                             {"hubs", watcher_.hub_urls()}});
  } catch (const Refused& e) {
    limiter_.failed(key, now);
    log_.warning("enrolment from " + peer.address + " refused: " + e.what());
    return error_answer(403, "refused", e.what());
  } catch (const json::exception&) {
    limiter_.failed(key, now);
    return error_answer(400, "invalid_argument",
                        "an enrolment is JSON with token_id, secret, name and request");
  }
}

HttpResponse HubServer::renew(const HttpRequest& request, const net::PeerIdentity& peer) {
  const auto agent = enrolled_agent(peer);
  if (!agent) {
    auto refused = error_answer(403, "forbidden", "this certificate is not an enrolled agent's");
    refused.close_connection = true;
    return refused;
  }
  try {
    const auto body = json::parse(request.body);
    auto renewed =
        store_.renew(agent->name, peer.serial, body.at("request").get<std::string>(), unix_now());
    watcher_.note(renewed.agent);
    log_.info("renewed the certificate of agent " + agent->name);
    return json_answer(200, {{"certificate", renewed.certificate_pem}, {"ca", renewed.ca_pem}});
  } catch (const Refused& e) {
    return error_answer(403, "refused", e.what());
  } catch (const json::exception&) {
    return error_answer(400, "invalid_argument", "a renewal is JSON with request");
  }
}

}  // namespace garm_edge::hub
