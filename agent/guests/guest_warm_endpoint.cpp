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

net::HttpResponse GuestService::serve_warm(const net::HttpRequest& request,
                                           const std::string& source_ip, bool ready_report) {
  const auto token = bearer_token(request);
  const auto entry = token ? index_.by_warm_token(net::sha256_hex(*token), source_ip)
                           : std::optional<GuestIndex::Entry>();
  if (!entry || request.method != (ready_report ? "POST" : "GET")) {
    return refuse(source_ip);
  }
  if (ready_report) {
    instances_.mark_warm_ready(entry->domain_name);  // a repeated report changes nothing
    return {.status = 200,
            .content_type = "text/plain; charset=utf-8",
            .body = "ready\n",
            .headers = {}};
  }
  if (auto assignment = instances_.take_assignment(entry->domain_name)) {
    ++counters_.warm_assignments;
    std::size_t repeats = 0;  // a guest fetching in a loop is recorded once
    if (reports_.admit(entry->domain_name, "warm-assignment", "", repeats)) {
      if (const auto record = store_.get(entry->domain_name)) {
        instances_.events().record("warm-assignment", record->name, record->controller_id,
                                   "the warm guest fetched its assignment");
      }
    }
    return {.status = 200,
            .content_type = "text/x-shellscript",
            .body = userdata::assignment_at(*assignment, clock_.now(), net::random_token()),
            .headers = {}};
  }
  return {.status = 204, .content_type = "text/plain; charset=utf-8", .body = "", .headers = {}};
}

}  // namespace garm_edge::agent
