#include "agent/guests/guest_service.hpp"

#include <nlohmann/json.hpp>

#include "agent/base/prometheus_text.hpp"
#include "agent/guests/garm_agent.hpp"
#include "common/text.hpp"
#include "net/http_syntax.hpp"
#include "net/secret_token.hpp"
#include "userdata/userdata.hpp"
#include "wire/json_fields.hpp"

namespace garm_edge::agent {
namespace {

constexpr std::string_view kCallbacks = "/api/v1/callbacks";
constexpr std::string_view kMetadata = "/api/v1/metadata";
constexpr std::size_t kMaxMessages = 50;
/// Answers the relay reads or rewrites whole (scripts, runner metadata, errors); everything
/// else streams.
constexpr std::size_t kMaxWholeAnswerBytes = 4 * 1024 * 1024;
/// How long a streamed answer waits for the guest to take the pipe's contents.
constexpr std::chrono::seconds kMaxGuestStall{30};

net::HttpResponse service_unavailable() {
  return {.status = 503,
          .content_type = "text/plain; charset=utf-8",
          .body = "service unavailable\n",
          .headers = {{"Retry-After", "5"}}};
}

bool is_one_of(std::string_view suffix, std::initializer_list<std::string_view> paths) {
  if (suffix.ends_with('/')) {
    suffix.remove_suffix(1);
  }
  return std::find(paths.begin(), paths.end(), suffix) != paths.end();
}

/// garm's answer as the guest gets it: status, content type, disposition; `body` or `stream`.
net::HttpResponse answer_for_guest(const net::ClientResponse& answer, std::string body,
                                   std::shared_ptr<net::BodyPipe> stream) {
  net::HttpResponse response{
      .status = answer.status,
      .content_type = std::string(answer.header("content-type").value_or("text/plain")),
      .body = std::move(body),
      .headers = {},
      .stream = std::move(stream)};
  if (const auto disposition = answer.header("content-disposition")) {
    response.headers.emplace_back("Content-Disposition", std::string(*disposition));
  }
  return response;
}

/// The WebSocket headers of an upgrade, passed on as they are in `names` (lower case) from
/// `find`, under their usual spelling.
template <typename Find>
std::vector<std::pair<std::string, std::string>> websocket_headers(
    const Find& find, std::initializer_list<std::pair<std::string_view, std::string_view>> names) {
  std::vector<std::pair<std::string, std::string>> headers;
  for (const auto& [lower, spelled] : names) {
    if (const auto value = find(lower)) {
      headers.emplace_back(std::string(spelled), std::string(*value));
    }
  }
  return headers;
}

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

net::HttpServerOptions guest_server_options(const AgentConfig& config, const GuestAccess& access,
                                            const GuestIndex& index) {
  net::HttpServerOptions options;
  options.address = access.address();
  options.port = config.guests.port;
  options.max_connections = config.guests.max_connections;
  options.limits.max_body_bytes = 256 * 1024;  // status reports, not uploads
  options.idle_timeout = std::chrono::seconds(10);
  options.admit_address = [&index](const asio::ip::address& peer) {
    return index.holds_address(peer.to_string());
  };
  return options;
}

GuestService::GuestService(const AgentConfig& config, InstanceService& instances,
                           InstanceStore& store, GuestIndex& index, GuestAccess& access,
                           GarmRelay& relay, RunnerArchiveCache* archives, AgentSockets* sockets,
                           const Clock& clock, Logger& log)
    : config_(config),
      instances_(instances),
      store_(store),
      index_(index),
      access_(access),
      relay_(relay),
      archives_(archives),
      sockets_(sockets),
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
  return service_unavailable();
}

void GuestService::handle_async(const net::HttpRequest& request, const std::string& source_ip,
                                Respond respond) {
  auto answered = std::make_shared<std::atomic<bool>>(false);
  const Respond once = [answered, respond = std::move(respond)](net::HttpResponse response) {
    if (!answered->exchange(true)) {
      respond(std::move(response));
    }
  };
  try {
    if (dispatch(request, source_ip, once)) {
      return;
    }
  } catch (const std::exception& e) {
    log_.error(std::string("guest service: ") + e.what());
    return once(service_unavailable());  // a no-op once garm's answer has begun
  } catch (...) {
    log_.error("guest service: unknown failure");
    return once(service_unavailable());
  }
  once(handle(request, source_ip));
}

bool GuestService::dispatch(const net::HttpRequest& request, const std::string& source_ip,
                            const Respond& respond) {
  if (misses_.blocked(source_ip)) {
    return false;  // handle() says so
  }
  const std::string_view path = request.path;
  if (path == "/agent" || path == "/agent/") {
    if (!config_.guests.relay || sockets_ == nullptr) {
      return false;
    }
    open_agent_socket(request, source_ip, respond);
    return true;
  }
  for (const auto& [prefix, callback] :
       {std::pair{kCallbacks, true}, std::pair{kMetadata, false}}) {
    if (config_.guests.relay && path.starts_with(prefix) &&
        (path.size() == prefix.size() || path[prefix.size()] == '/') &&
        is_garm_endpoint(callback, path.substr(prefix.size()))) {
      relay(request, source_ip, callback, path.substr(prefix.size()), respond);
      return true;
    }
  }
  return serve_runner_archive(request, source_ip, respond);
}

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
  archives_->fetch(archive_source_of(*record->guest), [this, name = record->name,
                                                       respond](RunnerArchiveCache::Outcome got) {
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
      {"warm_assignment", &counters_.warm_assignments},
      {"agent_socket_opened", &counters_.agent_sockets}};
  for (const auto& [outcome, count] : outcomes) {
    text.sample("garm_edge_guest_requests_total", {{"outcome", outcome}}, count->load());
  }
  text.family("garm_edge_guest_reports_not_recorded_total", "counter",
              "Guest status reports relayed to garm but not recorded: repeats, or over a "
              "guest's share of the event history and log.");
  text.sample("garm_edge_guest_reports_not_recorded_total", {}, counters_.reports_coalesced.load());
  if (sockets_ != nullptr) {
    text.family("garm_edge_guest_agent_sockets", "gauge",
                "garm-agent WebSockets relayed to garm now.");
    text.sample("garm_edge_guest_agent_sockets", {}, std::uint64_t{sockets_->open()});
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

void GuestService::relay(const net::HttpRequest& request, const std::string& source_ip,
                         bool callback, std::string_view suffix, const Respond& respond) {
  const auto token = bearer_token(request);
  const auto entry = token ? index_.by_bearer_token(net::sha256_hex(*token), source_ip)
                           : std::optional<GuestIndex::Entry>();
  if (!entry || entry->warm_unbound || (request.method != "GET" && request.method != "POST")) {
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
    instances_.update_guest(domain_name, [&](GuestRecord& stored) {
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

void GuestService::open_agent_socket(const net::HttpRequest& request, const std::string& source_ip,
                                     const Respond& respond) {
  const auto upgrade = request.header("upgrade");
  const auto token = bearer_token(request);
  const auto name = token ? agent_token_instance(*token) : std::nullopt;
  const auto entry = index_.instance_at(source_ip);
  const auto record = entry ? store_.get(entry->domain_name) : std::nullopt;
  if (request.method != "GET" || !upgrade ||
      !net::http_syntax::equals_ignoring_case(*upgrade, "websocket") || !name || !record ||
      record->intent != Intent::created || !record->guest || record->guest->ip != source_ip ||
      record->name != *name) {
    return respond(refuse(source_ip));
  }
  auto headers = websocket_headers([&](std::string_view n) { return request.header(n); },
                                   {{"authorization", "Authorization"},
                                    {"sec-websocket-key", "Sec-WebSocket-Key"},
                                    {"sec-websocket-version", "Sec-WebSocket-Version"},
                                    {"sec-websocket-protocol", "Sec-WebSocket-Protocol"},
                                    {"sec-websocket-extensions", "Sec-WebSocket-Extensions"},
                                    {"user-agent", "User-Agent"}});
  std::shared_ptr<net::WebSocketTunnel> tunnel;
  try {
    tunnel = relay_.open_websocket(upstream_agent_url(*record->guest),
                                   record->guest->ca_cert_bundle, headers);
  } catch (const std::exception& e) {
    ++counters_.relay_failures;
    log_.warning("agent socket for " + record->name + " to garm failed: " + e.what());
    return respond(bad_gateway());
  }
  const auto& answer = tunnel->answer();
  if (!tunnel->switched()) {
    if (answer.status == 401) {
      // The token named this instance, but garm did not issue it. garm-agent itself redials
      // every 5 s, so a stale token of its own stays under the 20 misses a minute.
      misses_.miss(source_ip);
    }
    return respond(answer_for_guest(answer, answer.body, nullptr));
  }
  ++counters_.agent_sockets;
  net::HttpResponse switching{
      .status = 101,
      .content_type = "",
      .body = "",
      .headers = websocket_headers([&](std::string_view n) { return answer.header(n); },
                                   {{"upgrade", "Upgrade"},
                                    {"connection", "Connection"},
                                    {"sec-websocket-accept", "Sec-WebSocket-Accept"},
                                    {"sec-websocket-protocol", "Sec-WebSocket-Protocol"},
                                    {"sec-websocket-extensions", "Sec-WebSocket-Extensions"}})};
  switching.upgrade = [this, tunnel, domain_name = record->domain_name, name = record->name](
                          UniqueFd socket, std::string early_bytes) {
    sockets_->carry(domain_name, name, tunnel, std::move(socket), std::move(early_bytes),
                    [this, &domain_name] { return index_.get(domain_name).has_value(); });
  };
  respond(std::move(switching));
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
  if (status_update &&
      !reports_.admit(domain_name, guest_text(report.value("status", nlohmann::json()), 32),
                      guest_text(report.value("message", nlohmann::json())), suppressed)) {
    ++counters_.reports_coalesced;
    return;  // garm has it; a repeat, or one too many of this guest's, is not recorded again
  }
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
        (record->guest->messages.empty() ? "" : record->guest->messages.back().message) +
            (suppressed > 0 ? " (" + std::to_string(suppressed) + " reports not recorded before)"
                            : std::string()));
  }
}

}  // namespace garm_edge::agent
