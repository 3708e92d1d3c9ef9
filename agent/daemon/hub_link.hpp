#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <functional>
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

/// The agent's side of its hub (docs/fleet.md): once the host has joined, keeps a few idle
/// tunnels open to the hub (the agent is the TLS client; the hub sends requests over them),
/// dials more as they are taken, redials with jittered backoff, renews the certificate
/// before it expires and uses new certificate files without a restart. Nothing listens.
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
    std::size_t open = 0;
    std::size_t busy = 0;
    std::string last_error;
  };
  Status status() const;

 private:
  void run();
  /// Loads the enrolment and the TLS config when they appear or change; false when none.
  bool refresh();
  void renew_if_due();
  void fetch_crl_if_due();
  bool dial_one();
  void wait_for(std::chrono::milliseconds delay);
  void note_error(const std::string& error);

  std::filesystem::path state_dir_;
  net::TlsServer& tunnels_;
  net::TlsServer::Handler serve_;
  std::string version_;
  std::vector<std::string> features_;
  Logger& log_;
  HubLinkOptions options_;

  /// Shared with the tunnels' callbacks, which may outlive the link.
  struct Shared {
    std::mutex mutex;
    std::condition_variable changed;
    std::size_t open = 0;
    std::size_t busy = 0;
    bool stopping = false;
    bool enrolled = false;
    std::uint64_t events = 0;  // bumped by every change the link's thread should look at
    std::string last_error;
    void bump() {
      {
        std::lock_guard lock(mutex);
        ++events;
      }
      changed.notify_all();
    }
  };
  std::shared_ptr<Shared> shared_ = std::make_shared<Shared>();
  // The link's thread alone uses these.
  std::optional<HubEnrolment> enrolment_;
  std::shared_ptr<const net::TlsConfig> tls_;
  /// The session the last tunnel's handshake made, resumed by the next dials.
  net::SessionMemory sessions_;
  std::filesystem::file_time_type credentials_written_{};
  std::filesystem::file_time_type joined_at_{};
  std::chrono::steady_clock::time_point next_renewal_check_{};
  std::chrono::steady_clock::time_point next_crl_fetch_{};
  std::chrono::milliseconds backoff_;
  std::thread thread_;
};

/// The identity a request through the hub acts as: the caller the hub vouches for (its client
/// certificate's CN), marked as come through the hub.
net::PeerIdentity caller_through_hub(const net::HttpRequest& request);
inline constexpr std::string_view kThroughHubIdentity = "urn:garm-edge:through-hub";

}  // namespace garm_edge::agent
