#include "agent/guests/guest_service.hpp"

#include <nlohmann/json.hpp>

#include "agent/base/prometheus_text.hpp"
#include "common/text.hpp"
#include "net/secret_token.hpp"
#include "userdata/userdata.hpp"
#include "wire/json_fields.hpp"

namespace garm_edge::agent {
namespace {

constexpr std::string_view kCallbacks = "/api/v1/callbacks";
constexpr std::string_view kMetadata = "/api/v1/metadata";
constexpr std::size_t kMaxMessages = 50;

net::HttpResponse not_found() {
  // Go's default 404, so a probe learns nothing about which check failed.
  return {.status = 404,
          .content_type = "text/plain; charset=utf-8",
          .body = "404 page not found\n",
          .headers = {}};
}

net::HttpResponse bad_gateway() {
  return {.status = 502,
          .content_type = "application/json",
          .body = R"({"error":"Server error","details":"garm could not be reached"})",
          .headers = {}};
}

/// garm's own parsing of the header: split on single spaces, exactly two parts, take the
/// second (the scheme word is not checked).
std::optional<std::string> bearer_token(const net::HttpRequest& request) {
  const auto header = request.header("authorization");
  if (!header) {
    return std::nullopt;
  }
  const auto space = header->find(' ');
  if (space == std::string_view::npos || header->find(' ', space + 1) != std::string_view::npos ||
      space + 1 == header->size()) {
    return std::nullopt;
  }
  return std::string(header->substr(space + 1));
}

/// Guest-supplied text made safe to store and log: UTF-8 without control characters, bounded.
std::string guest_text(const nlohmann::json& value, std::size_t max_bytes = 1024) {
  if (!value.is_string()) {
    return "";
  }
  const auto text = value.get<std::string>().substr(0, max_bytes);
  if (is_plain_text(text)) {
    return text;
  }
  std::string ascii;
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    ascii += (byte < 0x20 || byte >= 0x7f) ? '?' : c;
  }
  return ascii;
}

std::optional<std::int64_t> agent_id_of(const nlohmann::json& body) {
  const auto it = body.find("agent_id");
  if (it != body.end() && it->is_number_integer()) {
    return it->get<std::int64_t>();
  }
  return std::nullopt;
}

/// garm's instance endpoints (garm-contract §3.3), each with or without a trailing slash.
/// Nothing else is forwarded: a guest must not reach garm's other routes through the relay.
bool is_garm_endpoint(bool callback, std::string_view suffix) {
  if (suffix.ends_with('/')) {
    suffix.remove_suffix(1);
  }
  if (suffix.find("..") != std::string_view::npos || suffix.find("//") != std::string_view::npos ||
      suffix.find('%') != std::string_view::npos) {
    return false;
  }
  if (callback) {
    return suffix == "/status" || suffix == "/system-info";
  }
  for (const std::string_view exact :
       {"/install-script", "/runner-registration-token", "/credentials/runner",
        "/credentials/credentials", "/credentials/credentials_rsaparams", "/system/service-name",
        "/systemd/unit-file", "/system/cert-bundle", "/runner-metadata", "/tools/garm-agent"}) {
    if (suffix == exact) {
      return true;
    }
  }
  // /tools/garm-agent/{id} and /tools/garm-agent/{id}/download
  constexpr std::string_view kTool = "/tools/garm-agent/";
  if (!suffix.starts_with(kTool)) {
    return false;
  }
  auto rest = suffix.substr(kTool.size());
  if (rest.ends_with("/download")) {
    rest.remove_suffix(std::string_view("/download").size());
  }
  return !rest.empty() &&
         rest.find_first_not_of("0123456789abcdefABCDEF-") == std::string_view::npos;
}

/// The record read after the index lookup still belongs to the same guest: the instance may
/// have been closed, or deleted and created again under its name, in between.
bool still_admits(const std::optional<InstanceRecord>& record, const std::string& token_hash,
                  std::string GuestRecord::*hash, const std::string& source_ip) {
  return record && record->intent == Intent::created && record->guest && !record->guest->closed &&
         record->guest->ip == source_ip &&
         net::constant_time_equal(record->guest.value().*hash, token_hash);
}

bool is_seed_file(std::string_view file) {
  return file == "meta-data" || file == "user-data" || file == "vendor-data";
}

}  // namespace

bool MissLimiter::blocked(const std::string& source) {
  std::lock_guard lock(mutex_);
  const auto it = windows_.find(source);
  const auto now = clock_.now();
  return it != windows_.end() && now >= it->second.start && now - it->second.start < window_ &&
         it->second.misses >= max_misses_;
}

void MissLimiter::miss(const std::string& source) {
  std::lock_guard lock(mutex_);
  const auto now = clock_.now();
  if (windows_.size() > 4096) {
    std::erase_if(windows_, [&](const auto& entry) { return now - entry.second.start >= window_; });
  }
  auto& window = windows_[source];
  if (now - window.start >= window_ || now < window.start) {  // also after a clock step back
    window = {.start = now, .misses = 0};
  }
  ++window.misses;
}

GuestService::GuestService(const AgentConfig& config, InstanceService& instances,
                           InstanceStore& store, GuestIndex& index, GuestAccess& access,
                           GarmRelay& relay, RunnerArchiveCache* archives, const Clock& clock,
                           Logger& log)
    : config_(config),
      instances_(instances),
      store_(store),
      index_(index),
      access_(access),
      relay_(relay),
      archives_(archives),
      clock_(clock),
      log_(log),
      misses_(clock, 20, std::chrono::seconds(60)) {}

net::HttpResponse GuestService::handle(const net::HttpRequest& request,
                                       const std::string& source_ip) {
  try {
    return route(request, source_ip);
  } catch (const std::exception& e) {
    // e.g. the state directory is full or a record is unreadable: this request fails, the
    // agent keeps serving everyone else.
    log_.error(std::string("guest service: ") + e.what());
  } catch (...) {
    log_.error("guest service: unknown failure");
  }
  return {.status = 503,
          .content_type = "text/plain; charset=utf-8",
          .body = "service unavailable\n",
          .headers = {{"Retry-After", "5"}}};
}

void GuestService::handle_async(const net::HttpRequest& request, const std::string& source_ip,
                                Respond respond) {
  try {
    if (serve_runner_archive(request, source_ip, respond)) {
      return;
    }
  } catch (const std::exception& e) {
    log_.error(std::string("guest service: ") + e.what());
  }
  if (respond) {  // not handed on to a download that will answer
    respond(handle(request, source_ip));
  }
}

bool GuestService::serve_runner_archive(const net::HttpRequest& request,
                                        const std::string& source_ip, Respond& respond) {
  constexpr std::string_view kPrefix = "/runner-archives/";
  if (archives_ == nullptr || request.method != "GET" || !request.path.starts_with(kPrefix) ||
      misses_.blocked(source_ip)) {
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
      archive_source_of(*record->guest),
      [this, name = record->name, respond = std::move(respond)](RunnerArchiveCache::Outcome got) {
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

net::HttpResponse GuestService::route(const net::HttpRequest& request,
                                      const std::string& source_ip) {
  if (misses_.blocked(source_ip)) {
    ++counters_.rate_limited;
    return {.status = 429,
            .content_type = "text/plain; charset=utf-8",
            .body = "too many requests\n",
            .headers = {{"Retry-After", "60"}}};
  }
  const std::string_view path = request.path;
  for (const auto& [prefix, callback] :
       {std::pair{kCallbacks, true}, std::pair{kMetadata, false}}) {
    if (path.starts_with(prefix) && (path.size() == prefix.size() || path[prefix.size()] == '/')) {
      if (!config_.guests.relay || !is_garm_endpoint(callback, path.substr(prefix.size()))) {
        break;
      }
      return relay(request, source_ip, callback, path.substr(prefix.size()));
    }
  }
  if (path == "/warm/ready" || path == "/warm/assignment") {
    return serve_warm(request, source_ip, path == "/warm/ready");
  }
  // /<token>/<file>: what cloud-init 22.4's NoCloud reader asks for under the seed URL.
  if (request.method == "GET" && path.size() > 1 && path[0] == '/') {
    const auto slash = path.find('/', 1);
    if (slash != std::string_view::npos) {
      const auto token = path.substr(1, slash - 1);
      const auto file = path.substr(slash + 1);
      if (net::looks_like_token(token) && is_seed_file(file)) {
        return serve_seed(request, source_ip, token, file);
      }
    }
  }
  return refuse(source_ip);
}

std::string GuestService::render_metrics() const {
  PrometheusText text;
  text.family("garm_edge_guest_requests_total", "counter", "Guest service requests by outcome.");
  const std::pair<const char*, const std::atomic<std::uint64_t>*> outcomes[] = {
      {"seed_served", &counters_.seed_served},
      {"relayed", &counters_.relayed},
      {"relay_failed", &counters_.relay_failures},
      {"refused", &counters_.refused},
      {"rate_limited", &counters_.rate_limited},
      {"runner_archive_served", &counters_.runner_archives_served},
      {"runner_archive_unavailable", &counters_.runner_archives_unavailable},
      {"warm_assignment", &counters_.warm_assignments}};
  for (const auto& [outcome, count] : outcomes) {
    text.sample("garm_edge_guest_requests_total", {{"outcome", outcome}}, count->load());
  }
  return text.str();
}

net::HttpResponse GuestService::refuse(const std::string& source_ip) {
  ++counters_.refused;
  misses_.miss(source_ip);
  return not_found();
}

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
    return {.status = 200,
            .content_type = "text/x-shellscript",
            .body = std::move(*assignment),
            .headers = {}};
  }
  return {.status = 204, .content_type = "text/plain; charset=utf-8", .body = "", .headers = {}};
}

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
    instances_.update_guest(entry->domain_name, [&](GuestRecord& stored) {
      if (!stored.seed_served_at.empty()) {
        return false;
      }
      stored.seed_served_at = format_rfc3339(clock_.now());
      instances_.events().record("deploying", record->name, record->controller_id,
                                 "the guest fetched its seed from " + source_ip);
      return true;
    });
  }
  ++counters_.seed_served;
  const auto& body = file == "meta-data"   ? guest.meta_data
                     : file == "user-data" ? guest.user_data
                                           : guest.vendor_data;
  return {.status = 200, .content_type = "text/plain; charset=utf-8", .body = body, .headers = {}};
}

net::HttpResponse GuestService::relay(const net::HttpRequest& request, const std::string& source_ip,
                                      bool callback, std::string_view suffix) {
  const auto token = bearer_token(request);
  const auto entry = token ? index_.by_bearer_token(net::sha256_hex(*token), source_ip)
                           : std::optional<GuestIndex::Entry>();
  if (!entry || entry->warm_unbound || (request.method != "GET" && request.method != "POST")) {
    return refuse(source_ip);  // a warm guest reaches garm only as garm's instance
  }
  const auto record = store_.get(entry->domain_name);
  if (!still_admits(record, entry->bearer_token_hash, &GuestRecord::bearer_token_hash, source_ip)) {
    return refuse(source_ip);
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
  net::ClientResponse answer;
  try {
    answer =
        relay_.forward(callback ? userdata::callback_base(guest.callback_url) : guest.metadata_url,
                       guest.ca_cert_bundle, std::move(upstream));
  } catch (const std::exception& e) {
    ++counters_.relay_failures;
    log_.warning("relay for " + record->name + " to garm failed: " + e.what());
    return bad_gateway();
  }
  ++counters_.relayed;
  net::HttpResponse response{
      .status = answer.status,
      .content_type = std::string(answer.header("content-type").value_or("text/plain")),
      .body = std::move(answer.body),
      .headers = {}};
  if (const auto disposition = answer.header("content-disposition")) {
    response.headers.emplace_back("Content-Disposition", std::string(*disposition));
  }
  const bool install_script =
      !callback && (suffix == "/install-script" || suffix == "/install-script/");
  if (install_script && response.status == 200) {
    // The script garm renders names garm's URLs (and the runner's download URL); the guest
    // may have no route there.
    userdata::GuestEndpoints endpoints{.callback_url = access_.base_url() + std::string(kCallbacks),
                                       .metadata_url = access_.base_url() + std::string(kMetadata)};
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
             guest.runner_archive ? guest.runner_archive->temp_download_token : ""},
        endpoints);
  }
  if (callback && request.method == "POST" && response.status >= 200 && response.status < 300) {
    record_report(entry->domain_name, suffix, request.body);
  }
  return response;
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
  instances_.update_guest(domain_name, [&](GuestRecord& guest) {
    if (const auto agent_id = agent_id_of(report)) {
      guest.agent_id = agent_id;
    }
    if (system_info) {
      guest.os_name = guest_text(report.value("os_name", nlohmann::json()), 128);
      guest.os_version = guest_text(report.value("os_version", nlohmann::json()), 128);
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
    guest.messages.push_back(
        {.time = format_rfc3339(clock_.now()), .status = status, .message = message});
    if (guest.messages.size() > kMaxMessages) {
      guest.messages.erase(guest.messages.begin());
    }
    if (status == "idle" || status == "failed") {
      guest.closed = true;  // as garm does: bootstrap credentials stop working
    }
    return true;
  });
  if (const auto record = store_.get(domain_name); record && record->guest && status_update) {
    instances_.events().record(
        "guest-" + (record->guest->runner_status.empty() ? std::string("message")
                                                         : record->guest->runner_status),
        record->name, record->controller_id,
        record->guest->messages.empty() ? "" : record->guest->messages.back().message);
  }
}

}  // namespace garm_edge::agent
