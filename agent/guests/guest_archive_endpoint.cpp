// The guest service's runner archive endpoint: a guest's own archive from the host's cache.
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

bool GuestService::serve_runner_archive(const net::HttpRequest& request,
                                        const std::string& source_ip, const Respond& respond) {
  constexpr std::string_view kPrefix = "/runner-archives/";
  if (archives_ == nullptr || request.method != "GET" || !request.path.starts_with(kPrefix)) {
    return false;  // handle() refuses it
  }
  const auto sha256 = request.path.substr(kPrefix.size());
  const auto entry = index_.by_address(source_ip);
  const auto record = entry ? store_.get(entry->domain_name) : std::nullopt;
  if (!record || !record->guest || record->guest->closed || record->guest->ip != source_ip ||
      !record->guest->runner_archive || record->guest->runner_archive->sha256 != sha256) {
    return false;
  }
  archives_->fetch(
      archive_source_of(*record->guest), record->controller_id,
      [this, name = record->name, respond](RunnerArchiveCache::Outcome got) {
        if (got.file) {
          ++counters_.runner_archives_served;
          return respond({.status = 200,
                          .content_type = "application/octet-stream",
                          .body = "",
                          .headers = {},
                          .file = std::move(got.file)});
        }
        ++counters_.runner_archives_unavailable;
        log_.warning("no runner archive for " + name + ": " + got.error);
        respond({.status = 502,
                 .content_type = "text/plain; charset=utf-8",
                 .body = "the agent could not get the runner archive: " + got.error + "\n",
                 .headers = {}});
      });
  return true;
}

}  // namespace garm_edge::agent
