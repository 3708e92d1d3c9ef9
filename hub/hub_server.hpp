#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include <asio.hpp>

#include "common/log.hpp"
#include "common/unique_fd.hpp"
#include "hub/enrolment.hpp"
#include "hub/hub_config.hpp"
#include "hub/hub_store.hpp"
#include "hub/placement_views.hpp"
#include "hub/state_watcher.hpp"
#include "hub/tunnels.hpp"
#include "net/admin_server.hpp"
#include "net/tls_server.hpp"

namespace garm_edge::hub {

/// The hub daemon's two listeners: agents dial the first (to enrol, to renew, and to open the
/// tunnels the hub sends requests over); garm-provider-edge calls the second (the list of
/// agents, and requests relayed to one of them). State lives in the HubStore (files, or
/// PostgreSQL shared with other hubs); a StateWatcher follows it, so that `garm-edge-hub remove`
/// at any hub cuts an agent off here within a second.
class HubServer {
 public:
  HubServer(asio::io_context& io, HubConfig config, Logger& log,
            StateWatcher::Timing watch_timing = {});
  ~HubServer();
  HubServer(const HubServer&) = delete;
  HubServer& operator=(const HubServer&) = delete;

  void start();
  void stop();
  std::uint16_t agent_port() const { return agent_server_->port(); }
  std::uint16_t provider_port() const { return provider_server_->port(); }
  Tunnels& tunnels() { return tunnels_; }
  std::size_t open_connections() const;

 private:
  void on_agent_request(net::HttpRequest request, const net::PeerIdentity& peer,
                        const net::TlsServer::Respond& respond);
  void on_provider_request(net::HttpRequest request, const net::PeerIdentity& peer,
                           const net::TlsServer::Respond& respond);
  net::HttpResponse enrol(const net::HttpRequest& request, const net::PeerIdentity& peer);
  net::HttpResponse renew(const net::HttpRequest& request, const net::PeerIdentity& peer);
  net::HttpResponse open_tunnel(const net::HttpRequest& request, const net::PeerIdentity& peer);
  net::HttpResponse list_agents() const;
  /// GET /v1/hubs for an enrolled agent: every hub of the fleet it should keep tunnels to.
  net::HttpResponse hubs_answer(const net::PeerIdentity& peer);
  /// GET /metrics for a metrics reader: the hub's series and every connected agent's, asked
  /// through the tunnels (hub/fleet_metrics.hpp).
  void scrape_fleet(const std::string& reader, const net::TlsServer::Respond& respond);
  /// GET /v1/crl on both listeners: the CA's CRL (signed, so anyone may fetch it).
  net::HttpResponse crl_answer() const;
  void relay(const net::HttpRequest& request, const HubClient& caller,
             const net::TlsServer::Respond& respond);
  void answer_safely(const net::TlsServer::Respond& respond, const std::function<void()>& handle);
  /// POST /v1/relay: one request to many agents at once, all answers in one (a provider's
  /// ListInstances or placement probe over a hub's agents, in one connection instead of one per
  /// agent).
  void relay_to_many(const net::HttpRequest& request, const HubClient& client,
                     const net::TlsServer::Respond& respond);
  /// The enrolled agent `peer` is, by a certificate the hub issued and still accepts.
  std::optional<AgentRecord> enrolled_agent(const net::PeerIdentity& peer);
  /// A record command the CLI sent over the admin socket, run on this hub's store.
  net::AdminResult run_admin_command(const net::AdminRequest& request);
  /// On the event loop, after the watcher read the state again.
  void on_state_read();
  net::TlsFiles tls_files() const;
  static std::shared_ptr<const net::TlsConfig> load_agent_tls(const net::TlsFiles& files);
  std::filesystem::file_time_type crl_write_time() const;
  /// A revocation by another process (the CLI's remove, revoke-client): both listeners check new
  /// connections against the new CRL (live ones: at their next request, as the TLS server does).
  void reload_if_crl_changed();
  /// The enrolled agents as the watcher read them last: every list and every relay to all
  /// agents reads them.
  std::vector<AgentRecord> enrolled() const { return watcher_.agents(); }
  /// Closes the tunnels of every agent whose tunnels show a certificate the store no longer
  /// accepts (removed, or removed and enrolled again): it dials again, and is refused or not.
  void drop_revoked_tunnels();

  // ---- placement probes the hub answers itself (hub/placement_probes.cpp) ----------------
  struct ProbedInstance {
    std::string controller;  // lower case
    std::string name;
    /// `?share=fresh`: the controller's own use must be exact (the provider counts a fleet
    /// quota), so no view older than its last create there will do.
    bool fresh_share = false;
  };
  /// The instance a relayed `GET /v1/controllers/C/placement/NAME` probes; nothing for any
  /// other request.
  static std::optional<ProbedInstance> probed_instance(const std::string& method,
                                                       const std::string& target);
  /// Asks every connected agent that offers views for one when its view is a heartbeat
  /// interval old or missing.
  void refresh_placement_views();
  /// At most one view request per agent in flight; one asked for meanwhile follows it.
  void ask_placement_view(const std::string& agent);
  void take_placement_view(const std::string& agent, PlacementViews::Clock::time_point asked_at,
                           const std::optional<net::ClientResponse>& answer,
                           const std::string& error);
  /// A create or delete relayed to `agent`: placement counts it as in flight, and asks for a
  /// new view once it is answered (wraps `done`).
  void watch_instance_changes(const net::HttpRequest& request, const std::string& agent,
                              Tunnels::Done& done);

  asio::io_context& io_;
  HubConfig config_;
  Logger& log_;
  HubStore store_;
  /// `state_dir/serve.lock`, held while this hub serves it: a second hub on the same state
  /// directory would take its admin socket and rewrite its CRL file.
  UniqueFd serve_lock_;
  StateWatcher watcher_;
  /// Before tunnels_: a scrape's callback, held by the tunnels, counts itself out of it.
  std::atomic<std::size_t> scrapes_in_flight_{0};
  /// Before tunnels_ too: view requests and relayed creates call back into them.
  PlacementViews views_;
  std::mutex views_mutex_;
  std::set<std::string> views_asking_;   // views_mutex_
  std::set<std::string> views_stale_;    // views_mutex_: asked for again once answered
  std::set<std::string> views_failing_;  // views_mutex_: their last view request failed
  std::atomic<std::uint64_t> probes_answered_by_hub_{0};
  std::atomic<std::uint64_t> probes_relayed_{0};
  Tunnels tunnels_;
  EnrolmentLimiter limiter_;
  std::string ca_pem_;
  std::unique_ptr<net::TlsServer> agent_server_;
  std::unique_ptr<net::TlsServer> provider_server_;
  /// The CLI's record commands on this machine, run here (hub/record_commands.hpp).
  std::unique_ptr<net::AdminServer> admin_server_;
  std::filesystem::file_time_type crl_written_{};
};

}  // namespace garm_edge::hub
