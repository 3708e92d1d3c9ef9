#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <asio.hpp>

#include "agent/base/log.hpp"
#include "agent/daemon/hub_enrolment.hpp"
#include "net/tls_dial.hpp"
#include "net/tls_server.hpp"

namespace garm_edge::agent {

struct HubLinkOptions {
  /// Tunnels kept open and waiting for a request; one more is dialed as soon as one is taken.
  std::size_t idle_tunnels = 2;
  std::size_t max_tunnels = 16;
  std::chrono::milliseconds dial_timeout{std::chrono::seconds(10)};
  std::chrono::milliseconds min_backoff{std::chrono::milliseconds(250)};
  /// Low on purpose: agents must be back within seconds of a hub restart, and even 64 agents
  /// dialing a dead hub every few seconds cost it nothing.
  std::chrono::milliseconds max_backoff{std::chrono::seconds(3)};
  /// How often the link looks for a new enrolment, new certificate files and renewal time.
  std::chrono::milliseconds check_interval{std::chrono::seconds(1)};
  /// The certificate is renewed once less than this part of its lifetime is left.
  double renew_when_left = 1.0 / 3.0;
  /// How often the hub's CRL is fetched (and, when it changed, kept in the enrolment and
  /// `on_crl_change` called): a host removed at the hub is refused on this agent's own API
  /// within this interval.
  std::chrono::milliseconds crl_interval{std::chrono::seconds(15)};
  std::function<void()> on_crl_change = {};
};

/// The agent's side of its hubs (docs/fleet.md): once the host has joined, keeps a few idle
/// tunnels open to every hub of the fleet (the agent is the TLS client; the hub sends requests
/// over them), dials more as they are taken, redials with jittered backoff, renews the
/// certificate before it expires and uses new certificate files without a restart. Each hub's
/// tunnels have a thread of their own, so a dead hub never delays the tunnels to a live one;
/// the list of hubs is asked of any hub with the CRL. Nothing listens.
class HubLink {
 public:
  /// `serve` answers the requests that arrive over tunnels (served by `tunnels`' limits).
  HubLink(std::filesystem::path state_dir, net::TlsServer& tunnels, net::TlsServer::Handler serve,
          std::string version, std::vector<std::string> features, Logger& log,
          HubLinkOptions options = {});
  ~HubLink();
  HubLink(const HubLink&) = delete;
  HubLink& operator=(const HubLink&) = delete;

  void start();
  void stop();

  struct Status {
    bool enrolled = false;
    std::size_t open = 0;  // every hub's
    std::size_t busy = 0;
    std::size_t hubs_known = 0;
    std::size_t hubs_connected = 0;  // with at least one tunnel open
    std::string last_error;          // the latest, of any hub; cleared once that hub answers
  };
  Status status() const;

 private:
  /// What a thread waits on: stopping, or any change it should look at.
  struct Signal {
    mutable std::mutex mutex;
    std::condition_variable changed;
    bool stopping = false;
    std::uint64_t events = 0;  // bumped by every change the thread should look at
    std::string last_error;    // logged once until another one
    void bump() {
      {
        std::lock_guard lock(mutex);
        ++events;
      }
      changed.notify_all();
    }
    void stop() {
      {
        std::lock_guard lock(mutex);
        stopping = true;
      }
      changed.notify_all();
    }
  };
  /// The tunnels to one hub; shared with the tunnels' callbacks, which may outlive the link.
  struct HubTunnels {
    std::string url;
    Signal signal;
    std::size_t open = 0;  // signal.mutex
    std::size_t busy = 0;  // signal.mutex
  };
  struct Dialer {
    std::shared_ptr<HubTunnels> tunnels;
    std::thread thread;
  };

  void run();
  /// Loads the enrolment and the TLS config when they appear or change; false when none.
  bool refresh();
  void renew_if_due();
  /// The hubs this agent holds a tunnel to now: asked first for renewal, the CRL and the list.
  std::vector<std::string> hubs_with_tunnels() const;
  /// The CRL and the list of hubs, asked of any hub every crl_interval.
  void follow_fleet_if_due();
  void fetch_crl();
  void fetch_hubs();
  /// One dialer for every hub of the enrolment, none for a hub no longer listed.
  void update_dialers();
  void stop_dialers();
  void dial_loop(const std::shared_ptr<HubTunnels>& hub);
  bool dial_one(const std::shared_ptr<HubTunnels>& hub,
                const std::shared_ptr<const net::TlsConfig>& tls, net::SessionMemory& sessions);
  /// The tunnel joins the agent's tunnel server; its requests and its end count in `hub`.
  void adopt_tunnel(std::shared_ptr<net::TlsStream> stream, std::shared_ptr<HubTunnels> hub);
  /// The credentials' TLS config and how many times it changed (sessions made under an older
  /// one are forgotten).
  std::pair<std::shared_ptr<const net::TlsConfig>, std::uint64_t> credentials() const;
  void set_credentials(std::shared_ptr<const net::TlsConfig> tls);
  static void wait_for(Signal& signal, std::chrono::milliseconds delay);
  /// The link's own work succeeded: its last error is over (logged again if it comes back).
  void clear_error(Signal& signal);
  /// `source`: the hub whose tunnels failed; empty for the link's own work.
  void note_error(Signal& signal, const std::string& error, const std::string& source = {});

  std::filesystem::path state_dir_;
  net::TlsServer& tunnels_;
  net::TlsServer::Handler serve_;
  std::string version_;
  std::vector<std::string> features_;
  Logger& log_;
  HubLinkOptions options_;

  mutable Signal signal_;  // the link's own thread
  mutable std::mutex latest_error_mutex_;
  std::string latest_error_;         // latest_error_mutex_
  std::string latest_error_source_;  // latest_error_mutex_
  std::atomic<bool> enrolled_{false};
  mutable std::mutex credentials_mutex_;
  std::shared_ptr<const net::TlsConfig> tls_;  // credentials_mutex_
  std::uint64_t credentials_changes_ = 0;      // credentials_mutex_
  mutable std::mutex dialers_mutex_;
  std::map<std::string, Dialer> dialers_;  // dialers_mutex_; changed by the link's thread only
  // The link's thread alone uses these.
  std::optional<HubEnrolment> enrolment_;
  std::filesystem::file_time_type credentials_written_{};
  std::filesystem::file_time_type joined_at_{};
  std::chrono::steady_clock::time_point next_renewal_check_{};
  std::chrono::steady_clock::time_point next_fleet_check_{};
  bool dialers_current_ = false;  // the dialers match hubs.json as last read
  std::thread thread_;
};

/// The identity a request through the hub acts as: the caller the hub vouches for (its client
/// certificate's CN), marked as come through the hub.
net::PeerIdentity caller_through_hub(const net::HttpRequest& request);
inline constexpr std::string_view kThroughHubIdentity = "urn:garm-edge:through-hub";

}  // namespace garm_edge::agent
