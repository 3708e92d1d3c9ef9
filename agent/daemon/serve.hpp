#pragma once

#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <asio.hpp>

#include "agent/api/control_api.hpp"
#include "agent/base/clock.hpp"
#include "agent/base/config.hpp"
#include "agent/base/log.hpp"
#include "agent/caches/job_caches.hpp"
#include "agent/daemon/hub_link.hpp"
#include "agent/daemon/systemd_notify.hpp"
#include "agent/guests/garm_relay.hpp"
#include "agent/guests/guest_access.hpp"
#include "agent/guests/guest_attachments.hpp"
#include "agent/guests/guest_dispatcher.hpp"
#include "agent/guests/guest_index.hpp"
#include "agent/guests/guest_service.hpp"
#include "agent/images/pulled_images.hpp"
#include "agent/instances/instance_service.hpp"
#include "agent/instances/instance_store.hpp"
#include "agent/instances/reconcile_loop.hpp"
#include "agent/instances/warm_pool.hpp"
#include "agent/mirror/registry_mirror.hpp"
#include "hypervisor/libvirt_hypervisor.hpp"
#include "net/admin_server.hpp"
#include "net/http_server.hpp"
#include "net/tls_server.hpp"

namespace garm_edge::agent {

struct ServeOptions {
  /// Gets the bound port of the control API (tests listen on port 0).
  std::function<void(unsigned short)> on_listening;
  /// Once both services listen, written atomically: `api_port=…` and `guest_url=…` lines, for
  /// scripts that start the agent on port 0. Empty: none.
  std::filesystem::path ready_file;
};

/// The running agent, from its checks of the host to its last answered request. Construction
/// does everything that can fail because of the host (certificates, libvirt, the guest
/// network), so it fails before any port opens; run() serves until SIGINT or SIGTERM.
/// The config as served: without an [api] section (an agent behind NAT served only through
/// its hub), callers the hub vouches for may act for every controller.
AgentConfig with_hub_clients(AgentConfig config);

class AgentDaemon {
 public:
  AgentDaemon(const AgentConfig& config, Logger& log, ServeOptions options);
  ~AgentDaemon();
  AgentDaemon(const AgentDaemon&) = delete;
  AgentDaemon& operator=(const AgentDaemon&) = delete;

  /// Reconciles, serves both APIs, and returns the exit code once stopped and drained.
  int run();

 private:
  void start_guest_service();
  void reconcile_at_startup();
  void start_control_api();
  /// Once the host has joined a hub (now or later): tunnels to it, served like the API.
  void start_hub_link();
  /// With [[warm]] entries: passes of the warm pool every few seconds.
  void start_warm_pool();
  /// With images that have a source: their pulls, and replaced bases removed once unused.
  void start_image_pulls();
  /// Guests get the caches' current generations; due refreshes start; unused generations go.
  void start_cache_refreshes();
  /// `<state_dir>/admin.sock`: the images CLI and reconcile talk to this process.
  void start_admin_socket();
  /// The log line, the ready file, the on_listening callback and systemd's READY=1.
  void announce_ready();
  /// /metrics of the link to the hub and of the certificates the agent serves and trusts.
  std::string render_link_metrics() const;
  void wait_for_signal();
  /// SIGHUP reloads the certificates; SIGINT and SIGTERM stop.
  void on_signal(int signal);
  void reload_certificates();
  void begin_stopping();
  /// Stops the event loop once no connection is open, or at `deadline`.
  void drain(std::chrono::steady_clock::time_point deadline);
  void feed_watchdog();

  const AgentConfig& config_;
  Logger& log_;
  ServeOptions options_;
  std::shared_ptr<const net::TlsConfig> tls_;
  hypervisor::LibvirtHypervisor hypervisor_;
  FileInstanceStore store_;
  SystemClock clock_;
  InstanceService service_;
  /// Null when no image has a source.
  std::unique_ptr<PulledImages> images_;
  std::unique_ptr<PeriodicLoop> image_loop_;
  /// Null without [mirror]. Before the guest service: it serves the mirror from its start.
  std::unique_ptr<RegistryMirror> mirror_;
  /// Null when no cache is configured.
  std::unique_ptr<JobCaches> caches_;
  std::unique_ptr<PeriodicLoop> cache_loop_;

  asio::io_context io_;
  FairWorkQueue api_workers_;
  GuestIndex guest_index_;
  /// Null without guests or with runner_cache_mib = 0. Destroyed first (see ~AgentDaemon):
  /// downloads still under way then call no one.
  std::unique_ptr<RunnerArchiveCache> runner_archives_;
  GuestAccess guest_access_;
  /// garm-agent sockets relayed to garm: each on its own thread, ended with their instance.
  AgentSockets agent_sockets_;
  GuestAttachments guest_attachments_;
  HttpGarmRelay relay_;
  GuestService guests_;
  /// Guest requests on their own workers (seeds, relays, downloads), apart from the API's: a
  /// slow garm holds up neither the control API nor the seed fetches of booting guests.
  std::unique_ptr<GuestDispatcher> guest_dispatcher_;
  std::unique_ptr<net::HttpServer> guest_server_;
  std::unique_ptr<ReconcileLoop> reconcile_loop_;
  std::unique_ptr<WarmPool> warm_pool_;
  std::unique_ptr<PeriodicLoop> warm_loop_;
  ControlApi api_;
  std::unique_ptr<net::TlsServer> api_server_;  // null without an [api] section
  /// Never listens: it serves the tunnels the hub link dials, under its own limits.
  std::unique_ptr<net::TlsServer> tunnel_server_;
  std::unique_ptr<HubLink> hub_link_;
  /// The operator's commands (images, reconcile), from run() on.
  std::unique_ptr<net::AdminServer> admin_;

  const SystemdNotifier systemd_;
  asio::steady_timer watchdog_timer_;
  asio::steady_timer drain_timer_;
  /// From run() on: until the agent serves, SIGTERM and SIGINT end it at once, as before any
  /// work it would have to drain.
  std::optional<asio::signal_set> signals_;
};

/// Runs the agent: reconciles, then serves the control API over mutual TLS until SIGINT or
/// SIGTERM; SIGHUP reloads certificates, key, CA and CRL without dropping connections.
/// Returns the exit code.
int serve(const AgentConfig& config, Logger& log, ServeOptions options = {});

}  // namespace garm_edge::agent
