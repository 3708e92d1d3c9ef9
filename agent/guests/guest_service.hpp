#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "agent/base/clock.hpp"
#include "agent/base/config.hpp"
#include "agent/base/log.hpp"
#include "agent/guests/agent_sockets.hpp"
#include "agent/guests/assignment_waiters.hpp"
#include "agent/guests/garm_relay.hpp"
#include "agent/guests/guest_access.hpp"
#include "agent/guests/guest_index.hpp"
#include "agent/guests/report_limiter.hpp"
#include "agent/instances/instance_service.hpp"
#include "agent/instances/instance_store.hpp"
#include "agent/runner_archives/archive_cache.hpp"
#include "net/http_request.hpp"
#include "net/http_response.hpp"
#include "net/http_server.hpp"

namespace garm_edge::agent {

/// Counts requests that identified no instance, per source address, and says when one
/// address has missed too often lately (a guest guessing tokens).
class MissLimiter {
 public:
  MissLimiter(const Clock& clock, std::size_t max_misses, std::chrono::seconds window)
      : clock_(clock), max_misses_(max_misses), window_(window) {}

  /// Has `source` missed too often in the current window?
  bool blocked(const std::string& source);
  /// Counts one request from `source` that identified no instance.
  void miss(const std::string& source);

 private:
  struct Window {
    std::chrono::system_clock::time_point start;
    std::size_t misses = 0;
  };
  const Clock& clock_;
  std::size_t max_misses_;
  std::chrono::seconds window_;
  std::mutex mutex_;
  std::map<std::string, Window> windows_;
};

/// The guest server's settings: where it listens, its limits, and who it serves at all (a
/// connection from an address that is no instance's, warm guests' included, is closed at
/// accept, before it can take a share meant for guests). `index` must outlive the server.
net::HttpServerOptions guest_server_options(const AgentConfig& config, const GuestAccess& access,
                                            const GuestIndex& index);

/// The host's registry mirror as the guest service reaches it (agent/mirror runs it).
struct MirrorEndpoint {
  std::filesystem::path socket;     // the registry's unix socket
  std::filesystem::path blob_root;  // a blob there before a guest asks for it is a hit
};

/// What guests can ask of the agent over plain HTTP: their NoCloud seed at
/// `/<seed token>/{meta-data,user-data,vendor-data}`, and (relay mode) garm's callback and
/// metadata endpoints under /api/v1/callbacks and /api/v1/metadata, forwarded to the garm that
/// created them. A request is served only when its token belongs to an instance whose access is
/// still open and its source address is that instance's reserved address; anything else gets
/// the same plain 404. Transport-free, so it is tested without sockets.
class GuestService {
 public:
  /// `archives` may be null: no runner archive cache. `sockets` may be null: garm-agent's
  /// socket is not relayed.
  GuestService(const AgentConfig& config, InstanceService& instances, InstanceStore& store,
               GuestIndex& index, GuestAccess& access, GarmRelay& relay,
               RunnerArchiveCache* archives, AgentSockets* sockets, const Clock& clock,
               Logger& log);
  ~GuestService();
  GuestService(const GuestService&) = delete;
  GuestService& operator=(const GuestService&) = delete;

  using Respond = std::function<void(net::HttpResponse)>;
  /// Answers `request` from `source_ip` (the peer address of the connection, never a header)
  /// through `respond`, exactly once: a relayed answer as it arrives from garm, a runner
  /// archive when its download ends (without holding a thread meanwhile), garm-agent's socket
  /// by switching the connection over to garm's.
  void handle_async(const net::HttpRequest& request, const std::string& source_ip, Respond respond);

  /// Guests' `GET`/`HEAD /v2/...` go to the host's registry mirror from now on (before the
  /// guest server starts).
  void serve_mirror(MirrorEndpoint mirror) { mirror_ = std::move(mirror); }
  /// Warm guests' long polls end unanswered (the event loop is done).
  void stop_waiting() { waiters_.stop(); }
  /// Warm guests' long polls held now.
  std::size_t assignment_polls() const { return waiters_.waiting(); }

  struct Counters {
    std::atomic<std::uint64_t> seed_served{0};
    std::atomic<std::uint64_t> relayed{0};
    std::atomic<std::uint64_t> relay_failures{0};
    std::atomic<std::uint64_t> refused{0};
    std::atomic<std::uint64_t> rate_limited{0};
    std::atomic<std::uint64_t> runner_archives_served{0};
    std::atomic<std::uint64_t> runner_archives_unavailable{0};
    std::atomic<std::uint64_t> warm_assignments{0};
    std::atomic<std::uint64_t> agent_sockets{0};
    /// Status reports relayed to garm but not recorded (repeats, or too many of one guest's).
    std::atomic<std::uint64_t> reports_coalesced{0};
    /// Blobs the mirror held before a guest asked (hits) or fetched for it (misses), and bytes.
    std::atomic<std::uint64_t> mirror_hits{0};
    std::atomic<std::uint64_t> mirror_misses{0};
    std::atomic<std::uint64_t> mirror_requests{0};
    std::atomic<std::uint64_t> mirror_bytes_served{0};
    std::atomic<std::uint64_t> mirror_bytes_saved{0};  // of the hits: what upstream did not send
  };
  const Counters& counters() const { return counters_; }
  /// The counters as Prometheus text.
  std::string render_metrics() const;

 private:
  /// What is answered through `respond` (relayed, streamed or switched); false: handle() it.
  bool dispatch(const net::HttpRequest& request, const std::string& source_ip,
                const Respond& respond);
  net::HttpResponse handle(const net::HttpRequest& request, const std::string& source_ip);
  net::HttpResponse route(const net::HttpRequest& request, const std::string& source_ip);
  net::HttpResponse serve_seed(const net::HttpRequest& request, const std::string& source_ip,
                               std::string_view token, std::string_view file);
  /// A warm guest's `POST /warm/ready` and `GET /warm/assignment` (204 until it is bound),
  /// with its own token from its reserved address.
  net::HttpResponse serve_warm(const net::HttpRequest& request, const std::string& source_ip,
                               bool ready_report);
  /// The warm guest whose token `request` carries from its own address, asking with `method`.
  std::optional<GuestIndex::Entry> warm_guest(const net::HttpRequest& request,
                                              const std::string& source_ip,
                                              std::string_view method);
  /// `GET /warm/assignment?wait=N`: held in waiters_ until the guest is bound; false (nothing
  /// answered) for any other request.
  bool wait_for_assignment(const net::HttpRequest& request, const std::string& source_ip,
                           const Respond& respond);
  /// The guest's assignment when it is bound (200), else nothing.
  std::optional<net::HttpResponse> assignment_for(const std::string& domain_name);
  /// What a held poll of `domain_name` gets now; nothing: it waits on. A saved guest waits
  /// past `expired`, through its save and restore.
  std::optional<net::HttpResponse> answer_poll(const std::string& domain_name, bool expired);
  /// garm's answer, passed on as it arrives (whole, for what the relay reads or rewrites).
  void relay(const net::HttpRequest& request, const std::string& source_ip, bool callback,
             std::string_view suffix, const Respond& respond);
  /// A script or runner metadata garm rendered, its garm URLs made the relay's.
  void rewrite_for_guest(net::HttpResponse& response, const std::string& domain_name,
                         const GuestRecord& guest);
  /// garm-agent's `GET /agent` upgrade: its agent token naming the instance at `source_ip`,
  /// while that instance exists (not only until idle).
  void open_agent_socket(const net::HttpRequest& request, const std::string& source_ip,
                         const Respond& respond);
  /// `/runner-archives/<sha256>` to the open instance at `source_ip` that was given that
  /// archive; false (nothing answered) when `request` asks for something else.
  bool serve_runner_archive(const net::HttpRequest& request, const std::string& source_ip,
                            const Respond& respond);
  void record_report(const std::string& domain_name, std::string_view suffix,
                     const std::string& body);
  /// A guest's pull through the host's registry mirror: any instance's address (warm guests and
  /// builders too), GET and HEAD only, nothing of the guest's credentials passed on.
  void relay_to_mirror(const net::HttpRequest& request, const std::string& source_ip,
                       const Respond& respond);
  /// The uniform 404, counted as a miss of `source_ip`.
  net::HttpResponse refuse(const std::string& source_ip);

  const AgentConfig& config_;
  InstanceService& instances_;
  InstanceStore& store_;
  GuestIndex& index_;
  GuestAccess& access_;
  GarmRelay& relay_;
  RunnerArchiveCache* archives_;
  AgentSockets* sockets_;
  const Clock& clock_;
  Logger& log_;
  MissLimiter misses_;
  ReportLimiter reports_;
  ReportLimiter system_reports_;  // system-info, apart: it never makes a status report a repeat
  Counters counters_;
  std::optional<MirrorEndpoint> mirror_;
  AssignmentWaiters waiters_;  // last: its thread calls the members above
};

}  // namespace garm_edge::agent
