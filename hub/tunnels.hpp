#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <asio.hpp>

#include "net/tls_channel.hpp"

namespace garm_edge::hub {

/// What an agent says about itself when it opens a tunnel.
struct AgentHello {
  std::string version;
  std::vector<std::string> features;
};

/// One agent as the hub sees it right now.
struct AgentPresence {
  std::string name;
  std::size_t tunnels = 0;  // open, idle or carrying a request
  std::size_t idle = 0;
  std::size_t waiting = 0;  // requests waiting for a tunnel
  std::optional<std::chrono::system_clock::time_point> last_seen;
  std::optional<std::chrono::system_clock::time_point> connected_since;
  AgentHello hello;
};

struct TunnelOptions {
  /// Tunnels one agent may hold open; more are closed at once (an agent gone wrong, or an
  /// attacker with one stolen certificate, cannot take the hub's descriptors).
  std::size_t max_per_agent = 32;
  /// Requests that may wait for a free tunnel of one agent; more are refused at once.
  std::size_t max_waiting_per_agent = 256;
  /// Of those, what one client may have waiting for one agent (requests and their bytes): the
  /// waiting requests of different clients are served in turn, so one client's burst delays
  /// the others by one request each at most.
  std::size_t max_waiting_per_client = 64;
  std::size_t max_waiting_bytes_per_client = 16 * 1024 * 1024;
  /// Every idle tunnel is asked /healthz every interval, so a dead path is found within the
  /// interval and the heartbeat timeout, and the agent (whose tunnels close when no request
  /// comes for its idle timeout) keeps them.
  std::chrono::milliseconds heartbeat_interval{std::chrono::seconds(10)};
  std::chrono::milliseconds heartbeat_timeout{std::chrono::seconds(5)};
  /// One answer of one agent (a list of thousands of instances is a few MiB): a hostile agent
  /// cannot make the hub hold more than this per tunnel.
  std::size_t max_response_bytes = 16 * 1024 * 1024;
};

/// The agents' tunnels, by agent name: requests for an agent go over one of its idle tunnels,
/// or wait (in order, each with its deadline) for one to come free or newly open. Thread-safe;
/// destroyed only after the event loop's threads have stopped (channels call back into it).
class Tunnels {
 public:
  /// The answer, or why there is none and whether the request may have reached the agent.
  using Done =
      std::function<void(std::optional<net::ClientResponse> answer, std::string error, bool sent)>;

  Tunnels(asio::io_context& io, TunnelOptions options);
  ~Tunnels();
  Tunnels(const Tunnels&) = delete;
  Tunnels& operator=(const Tunnels&) = delete;

  /// A tunnel agent `name` opened, showing the certificate with `serial`.
  void add(const std::string& name, const std::string& serial, AgentHello hello,
           std::shared_ptr<net::TlsStream> stream);
  /// The serials of the certificates each agent's open tunnels showed.
  std::map<std::string, std::set<std::string>> serials() const;
  /// Sends `request` (a whole HTTP/1.1 request) to agent `name` for `client` (whose turn it
  /// waits for when every tunnel is busy); `done` runs once with its answer or why there is
  /// none. `timeout` covers the wait for a tunnel and the exchange.
  void relay(const std::string& name, const std::string& client, std::string request,
             std::chrono::milliseconds timeout, Done done);
  /// Closes every tunnel of `name` and fails the requests waiting for one (its removal).
  void drop(const std::string& name);
  /// Asks every idle tunnel for /healthz every heartbeat interval: a tunnel that does
  /// not answer is closed. Runs by itself every interval once started.
  void start_heartbeats();
  std::vector<AgentPresence> presence() const;
  std::optional<AgentPresence> presence(const std::string& name) const;
  std::size_t tunnel_count() const;

 private:
  struct Waiter {
    std::uint64_t id;
    std::string client;
    std::string request;
    std::chrono::steady_clock::time_point deadline;
    Done done;
    std::shared_ptr<asio::steady_timer> timer;
  };
  struct Link {
    std::set<std::shared_ptr<net::TlsChannel>> open;
    std::map<const net::TlsChannel*, std::string> serials;
    std::deque<std::shared_ptr<net::TlsChannel>> idle;
    /// Per client, each in arrival order; clients take turns after `last_served`.
    std::map<std::string, std::deque<Waiter>> waiting;
    std::string last_served;
    std::size_t waiting_count() const;
    std::size_t waiting_bytes(const std::string& client) const;
    /// The next waiter in turn, taken out; nothing when none waits.
    std::optional<Waiter> next_waiter();
    std::vector<Waiter> take_all_waiting();
    std::optional<std::chrono::system_clock::time_point> last_seen;
    std::optional<std::chrono::system_clock::time_point> connected_since;
    AgentHello hello;
  };

  /// Runs `request` on `channel`; afterwards the channel serves the next waiter or goes idle.
  void run(const std::string& name, std::shared_ptr<net::TlsChannel> channel, std::string request,
           std::chrono::milliseconds timeout, Done done);
  /// A channel is free again (or new): give it to the first waiter, else keep it idle.
  void release(const std::string& name, std::shared_ptr<net::TlsChannel> channel);
  void closed(const std::string& name, const std::shared_ptr<net::TlsChannel>& channel);
  void expire_waiter(const std::string& name, const std::string& client, std::uint64_t id);
  void heartbeat();
  AgentPresence describe(const std::string& name, const Link& link) const;

  asio::io_context& io_;
  TunnelOptions options_;
  mutable std::mutex mutex_;
  std::map<std::string, Link> links_;
  std::uint64_t next_waiter_ = 0;
  asio::steady_timer heartbeat_timer_;
};

}  // namespace garm_edge::hub
