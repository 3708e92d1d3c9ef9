// The guest service's warm endpoints: a warm guest reports ready and fetches its assignment.
#include <nlohmann/json.hpp>

#include "agent/guests/garm_agent.hpp"
#include "agent/guests/guest_endpoint_support.hpp"
#include "agent/guests/guest_service.hpp"
#include "common/text.hpp"
#include "net/http_syntax.hpp"
#include "net/secret_token.hpp"
#include "userdata/userdata.hpp"
#include "wire/json_fields.hpp"

namespace garm_edge::agent {

namespace {

/// How long a warm guest's poll is held at most: well within the guest's own --max-time.
constexpr int kMaxPollSeconds = 60;

}  // namespace

std::optional<GuestIndex::Entry> GuestService::warm_guest(const net::HttpRequest& request,
                                                          const std::string& source_ip,
                                                          std::string_view method) {
  const auto token = bearer_token(request);
  if (!token || request.method != method) {
    return std::nullopt;
  }
  return index_.by_warm_token(net::sha256_hex(*token), source_ip);
}

net::HttpResponse GuestService::serve_warm(const net::HttpRequest& request,
                                           const std::string& source_ip, bool ready_report) {
  const auto entry = warm_guest(request, source_ip, ready_report ? "POST" : "GET");
  if (!entry) {
    return refuse(source_ip);
  }
  if (ready_report) {
    instances_.mark_warm_ready(entry->domain_name);  // a repeated report changes nothing
    return {.status = 200,
            .content_type = "text/plain; charset=utf-8",
            .body = "ready\n",
            .headers = {}};
  }
  return assignment_for(entry->domain_name).value_or(no_assignment_yet());
}

bool GuestService::wait_for_assignment(const net::HttpRequest& request,
                                       const std::string& source_ip, const Respond& respond) {
  if (request.path != "/warm/assignment") {
    return false;
  }
  const auto wait = requested_wait(request, kMaxPollSeconds);
  const auto entry = wait ? warm_guest(request, source_ip, "GET") : std::nullopt;
  if (!entry) {
    return false;  // answered at once, or refused, as without a wait
  }
  waiters_.park(entry->domain_name, *wait, respond);
  return true;
}

std::optional<net::HttpResponse> GuestService::assignment_for(const std::string& domain_name) {
  auto assignment = instances_.take_assignment(domain_name);
  if (!assignment) {
    return std::nullopt;
  }
  ++counters_.warm_assignments;
  std::size_t repeats = 0;  // a guest fetching in a loop is recorded once
  if (reports_.admit(domain_name, "warm-assignment", "", repeats)) {
    if (const auto record = store_.get(domain_name)) {
      instances_.events().record("warm-assignment", record->name, record->controller_id,
                                 "the warm guest fetched its assignment");
    }
  }
  return net::HttpResponse{
      .status = 200,
      .content_type = "text/x-shellscript",
      .body = userdata::assignment_at(*assignment, clock_.now(), net::random_token()),
      .headers = {}};
}

std::optional<net::HttpResponse> GuestService::answer_poll(const std::string& domain_name,
                                                           bool expired) {
  if (auto answer = assignment_for(domain_name)) {
    return answer;
  }
  if (!expired) {
    return std::nullopt;
  }
  const auto record = store_.get(domain_name);
  const bool asleep =
      record && record->warm &&
      (record->warm->state == WarmState::saving || record->warm->state == WarmState::saved);
  return asleep ? std::nullopt : std::optional(no_assignment_yet());
}

}  // namespace garm_edge::agent
