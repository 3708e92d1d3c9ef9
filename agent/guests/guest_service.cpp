#include "agent/guests/guest_service.hpp"

#include <nlohmann/json.hpp>

#include "agent/guests/garm_agent.hpp"
#include "agent/guests/guest_endpoint_support.hpp"
#include "common/prometheus_text.hpp"
#include "common/text.hpp"
#include "net/http_syntax.hpp"
#include "net/secret_token.hpp"
#include "userdata/userdata.hpp"
#include "wire/json_fields.hpp"

namespace garm_edge::agent {

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
      misses_(clock, 20, std::chrono::seconds(60)),
      waiters_([this](const std::string& domain_name, bool expired) {
        return answer_poll(domain_name, expired);
      }) {
  instances_.on_warm_bound([this](const std::string& domain_name) { waiters_.wake(domain_name); });
}

GuestService::~GuestService() {
  instances_.on_warm_bound({});
  waiters_.stop();
}

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
  if (mirror_ && (path == "/v2" || path.starts_with("/v2/"))) {
    relay_to_mirror(request, source_ip, respond);
    return true;
  }
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
  if (wait_for_assignment(request, source_ip, respond)) {
    return true;
  }
  return serve_runner_archive(request, source_ip, respond);
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
  if (mirror_) {
    text.family("garm_edge_mirror_requests_total", "counter",
                "Guests' requests to the registry mirror.");
    text.sample("garm_edge_mirror_requests_total", {}, counters_.mirror_requests.load());
    text.family("garm_edge_mirror_blobs_total", "counter",
                "Blobs guests pulled through the mirror: held already (hit) or fetched (miss).");
    text.sample("garm_edge_mirror_blobs_total", {{"outcome", "hit"}}, counters_.mirror_hits.load());
    text.sample("garm_edge_mirror_blobs_total", {{"outcome", "miss"}},
                counters_.mirror_misses.load());
    text.family("garm_edge_mirror_served_bytes_total", "counter",
                "Bytes the mirror sent to guests.");
    text.sample("garm_edge_mirror_served_bytes_total", {}, counters_.mirror_bytes_served.load());
    text.family("garm_edge_mirror_saved_bytes_total", "counter",
                "Bytes of blobs guests got from the mirror that upstream did not send again.");
    text.sample("garm_edge_mirror_saved_bytes_total", {}, counters_.mirror_bytes_saved.load());
  }
  return text.str();
}

net::HttpResponse GuestService::refuse(const std::string& source_ip) {
  ++counters_.refused;
  misses_.miss(source_ip);
  return not_found();
}

}  // namespace garm_edge::agent
