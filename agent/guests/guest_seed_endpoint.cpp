// The guest service's NoCloud seed endpoint.
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

net::HttpResponse GuestService::serve_seed(const net::HttpRequest&, const std::string& source_ip,
                                           std::string_view token, std::string_view file) {
  const auto entry = index_.by_seed_token(net::sha256_hex(token), source_ip);
  if (!entry) {
    return refuse(source_ip);
  }
  const auto record = store_.get(entry->domain_name);
  if (!still_admits(record, entry->seed_token_hash, &GuestRecord::seed_token_hash, source_ip)) {
    return refuse(source_ip);
  }
  const auto& guest = *record->guest;
  if (guest.seed_served_at.empty()) {
    instances_.startup().mark(entry->domain_name, StartupPhase::seed_fetched);
    instances_.update_guest(
        entry->domain_name,
        [served_at = format_rfc3339(clock_.now())](GuestRecord& stored) {
          if (!stored.seed_served_at.empty()) {
            return false;
          }
          stored.seed_served_at = served_at;
          return true;
        },
        [&events = instances_.events(), source_ip](const InstanceRecord& recorded) {
          events.record("deploying", recorded.name, recorded.controller_id,
                        "the guest fetched its seed from " + source_ip);
        });
  }
  ++counters_.seed_served;
  const auto& body = file == "meta-data"   ? guest.meta_data
                     : file == "user-data" ? guest.user_data
                                           : guest.vendor_data;
  return {.status = 200, .content_type = "text/plain; charset=utf-8", .body = body, .headers = {}};
}

}  // namespace garm_edge::agent
