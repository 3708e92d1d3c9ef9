#pragma once

// A hub and an agent's link to it in one process on loopback (tests/hub/): the hub server on an
// event loop of its own, an agent's HubLink answering with what it was asked and by whom.

#include <array>
#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "agent/daemon/hub_link.hpp"
#include "hub/hub_server.hpp"
#include "net/https_client.hpp"

namespace garm_edge::testing {

class QuietLog final : public Logger {
 public:
  void log(Level, std::string_view message) override {
    std::lock_guard lock(mutex_);
    lines_.emplace_back(message);
  }
  std::string text() {
    std::lock_guard lock(mutex_);
    std::string all;
    for (const auto& line : lines_) {
      all += line + "\n";
    }
    return all;
  }

 private:
  std::mutex mutex_;
  std::vector<std::string> lines_;
};

/// An event loop on two threads, stopped and joined before anything it runs is destroyed.
class Loop {
 public:
  Loop() {
    for (auto& thread : threads_) {
      thread = std::thread([this] { io.run(); });
    }
  }
  ~Loop() { stop(); }
  Loop(const Loop&) = delete;
  Loop& operator=(const Loop&) = delete;
  void stop() {
    io.stop();
    for (auto& thread : threads_) {
      if (thread.joinable()) {
        thread.join();
      }
    }
  }
  asio::io_context io;

 private:
  asio::executor_work_guard<asio::io_context::executor_type> work_ = asio::make_work_guard(io);
  std::array<std::thread, 2> threads_;
};

struct RunningHub {
  RunningHub(const std::filesystem::path& state, std::uint16_t agent_port, QuietLog& log,
             const std::function<void(hub::HubConfig&)>& adjust = {}) {
    hub::HubConfig config;
    config.state_dir = state;
    config.url = "https://127.0.0.1";
    config.agents.address = "127.0.0.1";
    config.agents.port = agent_port;
    config.providers.address = "127.0.0.1";
    config.providers.port = 0;
    config.clients = {
        {.identity = "garm", .controllers = {"9dcf590a-1192-4a9c-b3e4-e0902974c2c0"}}};
    config.tunnels.heartbeat_interval = std::chrono::milliseconds(300);
    if (adjust) {
      adjust(config);
    }
    server = std::make_unique<hub::HubServer>(loop.io, config, log);
    server->start();
  }
  ~RunningHub() {
    server->stop();
    loop.stop();
  }
  RunningHub(const RunningHub&) = delete;
  RunningHub& operator=(const RunningHub&) = delete;
  Loop loop;
  std::unique_ptr<hub::HubServer> server;
};

/// An agent's side: its link and a handler that answers with what it was asked and by whom.
struct LinkedAgent {
  /// `fleet_interval`: how often the link asks for the CRL and the fleet's hubs.
  LinkedAgent(const std::filesystem::path& state, std::chrono::milliseconds handler_delay,
              QuietLog& log, std::chrono::milliseconds fleet_interval = std::chrono::seconds(15))
      : tunnels(loop.io, tunnel_options(), nullptr, net::TlsServer::Handler{}) {
    link = std::make_unique<agent::HubLink>(
        state, tunnels,
        [this, handler_delay](net::HttpRequest request, const net::PeerIdentity&,
                              net::TlsServer::Respond respond) {
          const auto caller = agent::caller_through_hub(request);
          const std::lock_guard guard(handlers_mutex);
          if (closing) {
            return;  // the test is over: no thread may outlive the loop its answer goes to
          }
          if (!request.header("x-garm-edge-heartbeat")) {
            callers.push_back(caller.common_name);
          }
          handlers.emplace_back(
              [this, request, caller, handler_delay, respond = std::move(respond)] {
                if (!request.header("x-garm-edge-heartbeat")) {
                  std::unique_lock gate(gate_mutex);
                  gate_opened.wait(gate, [this] { return !gated; });
                }
                std::this_thread::sleep_for(handler_delay);
                if (!request.header("x-garm-edge-heartbeat")) {
                  ++served;
                }
                net::HttpResponse answer{.status = 200,
                                         .content_type = "application/json",
                                         .body = nlohmann::json({{"target", request.target},
                                                                 {"caller", caller.common_name},
                                                                 {"through_hub", caller.uri_names}})
                                                     .dump(),
                                         .headers = {}};
                if (request.target == "/metrics") {
                  // Who asked, and an attempt to pass for the hub's own series.
                  answer.content_type = "text/plain; version=0.0.4";
                  answer.body =
                      "# TYPE garm_edge_test_scrapes_total counter\n"
                      "garm_edge_test_scrapes_total{caller=\"" +
                      caller.common_name + "\",role=\"" + caller.uri_names.front() +
                      "\"} 1\n"
                      "# TYPE garm_edge_agent_up gauge\ngarm_edge_agent_up 1\n"
                      "# TYPE garm_edge_hub_link_enrolled gauge\ngarm_edge_hub_link_enrolled 1\n";
                }
                answer.close_connection = request.target.ends_with("/close");  // as a refusal does
                respond(std::move(answer));
              });
        },
        "9.9.9", std::vector<std::string>{"hub-tunnel"}, log,
        agent::HubLinkOptions{.idle_tunnels = 2,
                              .max_tunnels = 8,
                              .dial_timeout = std::chrono::seconds(5),
                              .min_backoff = std::chrono::milliseconds(50),
                              .max_backoff = std::chrono::milliseconds(300),
                              .check_interval = std::chrono::milliseconds(100),
                              .renew_when_left = 0.0,
                              .crl_interval = fleet_interval});
    link->start();
  }
  ~LinkedAgent() {
    open_gate();
    std::vector<std::thread> running;
    {
      const std::lock_guard guard(handlers_mutex);
      closing = true;
      running.swap(handlers);
    }
    for (auto& handler : running) {  // their answers hold connections of the loop below
      handler.join();
    }
    link->stop();
    loop.stop();
  }
  LinkedAgent(const LinkedAgent&) = delete;
  LinkedAgent& operator=(const LinkedAgent&) = delete;
  static net::TlsServerOptions tunnel_options() {
    net::TlsServerOptions options;
    options.idle_timeout = std::chrono::seconds(5);
    return options;
  }
  std::mutex handlers_mutex;
  bool closing = false;               // handlers_mutex
  std::vector<std::thread> handlers;  // handlers_mutex
  std::vector<std::string> callers;   // handlers_mutex: in the order requests arrived
  /// While gated, requests (not heartbeats) are held before they are answered.
  void close_gate() {
    const std::lock_guard guard(gate_mutex);
    gated = true;
  }
  void open_gate() {
    {
      const std::lock_guard guard(gate_mutex);
      gated = false;
    }
    gate_opened.notify_all();
  }
  std::mutex gate_mutex;
  std::condition_variable gate_opened;
  bool gated = false;  // gate_mutex
  Loop loop;
  net::TlsServer tunnels;
  std::unique_ptr<agent::HubLink> link;
  std::atomic<int> served{0};
};

inline net::HttpsResponse call_hub(const std::filesystem::path& pki, std::uint16_t port,
                                   const std::string& path,
                                   const std::string& client = "clients/garm",
                                   net::HttpsClientOptions options = {}) {
  net::HttpsClient client_of_hub(
      {.host = "localhost", .port = port},
      net::TlsConfig::load(net::TlsConfig::Role::client, {.ca = pki / "ca.crt",
                                                          .crl = "",
                                                          .certificate = pki / (client + ".crt"),
                                                          .key = pki / (client + ".key")}),
      std::move(options));
  return client_of_hub.request("GET", path);
}

inline std::size_t tunnels_of(hub::HubServer& server, const std::string& name) {
  const auto presence = server.tunnels().presence(name);
  return presence ? presence->tunnels : 0;
}

}  // namespace garm_edge::testing
