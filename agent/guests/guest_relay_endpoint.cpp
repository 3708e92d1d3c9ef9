// The guest service's relay of garm's callback and metadata endpoints, and what the agent
// records of the guest's reports.
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

/// What a guest's report (already relayed to garm) changes in its record.
bool apply_report(GuestRecord& guest, const nlohmann::json& report, bool status_update,
                  bool system_info, const std::string& now) {
  const auto agent_id = agent_id_of(report);
  const bool new_agent_id = agent_id && agent_id != guest.agent_id;
  if (new_agent_id) {
    guest.agent_id = agent_id;
  }
  if (system_info) {
    auto os_name = guest_text(report.value("os_name", nlohmann::json()), 128);
    auto os_version = guest_text(report.value("os_version", nlohmann::json()), 128);
    if (!new_agent_id && os_name == guest.os_name && os_version == guest.os_version) {
      return false;  // a repeat costs no disk write
    }
    guest.os_name = std::move(os_name);
    guest.os_version = std::move(os_version);
    return true;
  }
  if (!status_update) {
    return false;
  }
  const auto status = guest_text(report.value("status", nlohmann::json()), 32);
  const auto message = guest_text(report.value("message", nlohmann::json()));
  if (!status.empty()) {
    guest.runner_status = status;
  }
  guest.messages.push_back({.time = now, .status = status, .message = message});
  if (guest.messages.size() > kMaxMessages) {
    guest.messages.erase(guest.messages.begin());
  }
  if (status == "idle" || status == "failed") {
    guest.closed = true;  // as garm does: bootstrap credentials stop working
  }
  return true;
}

}  // namespace

void GuestService::relay(const net::HttpRequest& request, const std::string& source_ip,
                         bool callback, std::string_view suffix, const Respond& respond) {
  const auto token = bearer_token(request);
  const auto entry = token ? index_.by_bearer_token(net::sha256_hex(*token), source_ip)
                           : std::optional<GuestIndex::Entry>();
  if (!entry || entry->no_garm || (request.method != "GET" && request.method != "POST")) {
    return respond(refuse(source_ip));  // a warm guest reaches garm only as garm's instance
  }
  const auto record = store_.get(entry->domain_name);
  if (!still_admits(record, entry->bearer_token_hash, &GuestRecord::bearer_token_hash, source_ip)) {
    return respond(refuse(source_ip));
  }
  const auto& guest = *record->guest;
  if (record->warm && !record->warm->delivered) {
    instances_.finish_assignment(entry->domain_name);
  }
  net::ClientRequest upstream{
      .method = request.method,
      .target = std::string(suffix) + (request.query.empty() ? "" : "?" + request.query),
      .headers = {{"Authorization", std::string(*request.header("authorization"))}},
      .body = request.body};
  for (const char* name : {"content-type", "accept"}) {
    if (const auto value = request.header(name)) {
      upstream.headers.emplace_back(name, std::string(*value));
    }
  }
  const bool rewritten = !callback && is_one_of(suffix, {"/install-script", "/runner-metadata"});
  // The garm-agent binary is tens of MB: it gets the runner download's time, not a call's.
  const auto timeout =
      !callback && (suffix.ends_with("/download") || suffix.ends_with("/download/"))
          ? std::chrono::milliseconds(config_.guests.runner_download_timeout)
          : std::chrono::milliseconds(config_.guests.relay_timeout);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::shared_ptr<net::BodyPipe> pipe;
  std::string whole;
  auto on_head = [&](const net::ClientResponse& head) -> net::BodySink {
    // A callback's answer is tiny and the relay acts on it before the guest hears it.
    if (rewritten || callback || head.status != 200) {
      return [&whole](int, std::string_view data) {
        if (data.size() > kMaxWholeAnswerBytes - whole.size()) {
          throw net::HttpClientError("the answer is larger than the relay reads whole");
        }
        whole.append(data);
      };
    }
    pipe = std::make_shared<net::BodyPipe>();
    respond(answer_for_guest(head, "", pipe));
    return [pipe = pipe, deadline](int, std::string_view data) {
      // A guest that reads nothing for a while (or an agent that stopped serving) frees
      // this worker well before the whole download's deadline.
      const auto stalled = std::chrono::steady_clock::now() + kMaxGuestStall;
      if (!pipe->write(data, std::min(deadline, stalled))) {
        throw net::HttpClientError("the guest stopped reading the answer");
      }
    };
  };
  net::ClientResponse answer;
  try {
    answer =
        relay_.forward(callback ? userdata::callback_base(guest.callback_url) : guest.metadata_url,
                       guest.ca_cert_bundle, std::move(upstream), timeout, on_head);
  } catch (const std::exception& e) {
    ++counters_.relay_failures;
    log_.warning("relay for " + record->name + " to garm failed: " + e.what());
    if (pipe) {
      return pipe->finish(false);  // the guest sees a cut-off body
    }
    return respond(bad_gateway());
  }
  ++counters_.relayed;
  if (pipe) {
    return pipe->finish(true);
  }
  if (callback && request.method == "POST" && answer.status >= 200 && answer.status < 300) {
    record_report(entry->domain_name, suffix, request.body);  // before the guest goes on
  }
  auto response = answer_for_guest(answer, std::move(whole), nullptr);
  if (rewritten && response.status == 200) {
    rewrite_for_guest(response, entry->domain_name, guest);
  }
  respond(std::move(response));
}

void GuestService::rewrite_for_guest(net::HttpResponse& response, const std::string& domain_name,
                                     const GuestRecord& guest) {
  auto garm_agent_url = guest.garm_agent_url;
  if (const auto rendered = find_agent_url(response.body);
      rendered && *rendered != garm_agent_url) {
    garm_agent_url = *rendered;
    instances_.update_guest(domain_name, [garm_agent_url](GuestRecord& stored) {
      stored.garm_agent_url = garm_agent_url;
      return true;
    });
  }
  // garm renders its own URLs (and the runner's download URL); the guest may have no route
  // there.
  userdata::GuestEndpoints endpoints{.callback_url = access_.base_url() + std::string(kCallbacks),
                                     .metadata_url = access_.base_url() + std::string(kMetadata),
                                     .agent_url = access_.base_url() + "/agent"};
  if (archives_ != nullptr && guest.runner_archive) {
    endpoints.runner_archive_url =
        access_.base_url() + runner_archive_path(guest.runner_archive->sha256);
  }
  response.body = userdata::rewrite_garm_urls(
      response.body,
      {.callback_url = guest.callback_url,
       .metadata_url = guest.metadata_url,
       .runner_download_url = guest.runner_archive ? guest.runner_archive->download_url : "",
       .runner_download_token =
           guest.runner_archive ? guest.runner_archive->temp_download_token : "",
       .agent_url = garm_agent_url},
      endpoints);
}

void GuestService::record_report(const std::string& domain_name, std::string_view suffix,
                                 const std::string& body) {
  if (!wire::json_depth_within(body)) {
    return;  // garm took it; its nesting is not worth our memory
  }
  const auto report = nlohmann::json::parse(body, nullptr, false);
  if (!report.is_object()) {
    return;  // garm accepted it; there is nothing we can read in it
  }
  const bool status_update = suffix == "/status" || suffix == "/status/";
  const bool system_info = suffix == "/system-info" || suffix == "/system-info/";
  std::size_t suppressed = 0;
  const bool admitted =
      status_update
          ? reports_.admit(domain_name, guest_text(report.value("status", nlohmann::json()), 32),
                           guest_text(report.value("message", nlohmann::json())), suppressed)
          : !system_info || system_reports_.admit(domain_name, "system-info",
                                                  net::sha256_hex(report.dump()), suppressed);
  if (!admitted) {
    ++counters_.reports_coalesced;
    return;  // garm has it; a repeat, or one too many of this guest's, is not recorded again
  }
  instances_.update_guest(
      domain_name,
      [report, status_update, system_info, now = format_rfc3339(clock_.now())](GuestRecord& guest) {
        return apply_report(guest, report, status_update, system_info, now);
      },
      [&instances = instances_, status_update, suppressed](const InstanceRecord& recorded) {
        if (!status_update) {
          return;
        }
        auto& events = instances.events();
        const auto& guest = *recorded.guest;
        events.record(
            "guest-" + (guest.runner_status.empty() ? std::string("message") : guest.runner_status),
            recorded.name, recorded.controller_id,
            (guest.messages.empty() ? "" : guest.messages.back().message) +
                (suppressed > 0
                     ? " (" + std::to_string(suppressed) + " reports not recorded before)"
                     : std::string()));
        instances.record_startup_report(recorded, guest.runner_status);
      });
}

}  // namespace garm_edge::agent
