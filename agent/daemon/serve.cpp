#include "agent/daemon/serve.hpp"

#include <csignal>
#include <thread>

#include <asio.hpp>

#include "agent/api/control_api.hpp"
#include "agent/daemon/systemd_notify.hpp"
#include "agent/guests/garm_relay.hpp"
#include "agent/guests/guest_access.hpp"
#include "agent/guests/guest_attachments.hpp"
#include "agent/guests/guest_index.hpp"
#include "agent/guests/guest_service.hpp"
#include "agent/instances/instance_service.hpp"
#include "agent/instances/reconcile_loop.hpp"
#include "hypervisor/libvirt_hypervisor.hpp"
#include "net/http_server.hpp"
#include "net/tls_server.hpp"

namespace garm_edge::agent {
namespace {

net::TlsFiles tls_files(const ApiConfig& api) {
  return net::TlsFiles{
      .ca = api.ca, .crl = api.crl, .certificate = api.certificate, .key = api.key};
}

}  // namespace

int serve(const AgentConfig& config, Logger& log,
          const std::function<void(unsigned short)>& on_listening) {
  if (!config.api.enabled) {
    log.error("serve needs an [api] section in the config");
    return 1;
  }
  // Everything that can be wrong with the host fails here, before the port opens.
  auto tls = net::TlsConfig::load(net::TlsConfig::Role::server, tls_files(config.api));
  auto libvirt_options = config.libvirt;
  libvirt_options.on_connection_change = [&log](bool connected, const std::string& message) {
    connected ? log.info(message) : log.error(message);
  };
  hypervisor::LibvirtHypervisor hypervisor(libvirt_options);
  FileInstanceStore store(config.state_dir);
  SystemClock clock;
  InstanceService service(config, hypervisor, store, clock, log);

  asio::io_context io;
  // Relayed calls may wait on garm for seconds: they get their own threads, so a slow garm
  // holds up neither the control API nor the seed fetches of booting guests.
  asio::thread_pool relay_workers(config.guests.enabled ? 8 : 1);
  asio::thread_pool seed_workers(config.guests.enabled ? 4 : 1);
  GuestIndex guest_index;
  GuestAccess guest_access(config, hypervisor, log);
  GuestAttachments guest_attachments(guest_access, guest_index);
  HttpGarmRelay relay(net::HttpClientOptions{.connect_timeout = std::chrono::seconds(5),
                                             .request_timeout = config.guests.relay_timeout,
                                             .max_response_bytes = 64 * 1024 * 1024});
  GuestService guests(config, service, store, guest_index, guest_access, relay, clock, log);
  std::unique_ptr<net::HttpServer> guest_server;
  if (config.guests.enabled) {
    guest_access.start();
    net::HttpServerOptions guest_options;
    guest_options.address = guest_access.address();
    guest_options.port = config.guests.port;
    guest_options.max_connections = config.guests.max_connections;
    guest_options.limits.max_body_bytes = 256 * 1024;  // status reports, not uploads
    guest_options.idle_timeout = std::chrono::seconds(10);
    guest_server = std::make_unique<net::HttpServer>(
        io, guest_options, [&](net::HttpRequest request, std::string peer, auto respond) {
          auto& pool = request.path.starts_with("/api/") ? relay_workers : seed_workers;
          asio::post(pool, [&guests, request = std::move(request), peer = std::move(peer),
                            respond = std::move(respond)] {
            respond(guests.handle(request, peer));  // handle() never throws
          });
        });
    guest_server->start();
    guest_access.set_port(guest_server->port());
    service.serve_guests(guest_attachments);
    log.info("guest service listening on " + guest_access.base_url() +
             (config.guests.relay ? " (relay to garm)" : " (guests call garm directly)"));
  }
  if (const auto summary = summarize(service.reconcile()); !summary.empty()) {
    log.info("startup reconcile: " + summary);
  }
  ReconcileLoop reconcile_loop(service, config.reconcile_interval, log);

  ControlApi api(config, service);
  if (config.guests.enabled) {
    api.add_metrics_source([&guests] { return guests.render_metrics(); });
  }
  asio::thread_pool workers(config.api.workers);
  net::TlsServerOptions options;
  options.address = config.api.address;
  options.port = config.api.port;
  options.max_connections = config.api.max_connections;
  net::TlsServer server(
      io, options, tls, [&](net::HttpRequest request, net::PeerIdentity peer, auto respond) {
        asio::post(workers, [&api, request = std::move(request), peer = std::move(peer),
                             respond = std::move(respond)] { respond(api.handle(request, peer)); });
      });
  server.start();
  log.info("listening on " + config.api.address + ":" + std::to_string(server.port()) + " (agent " +
           config.agent_id + ")");
  if (on_listening) {
    on_listening(server.port());
  }

  // Commands already running finish in libvirt either way; their answers should reach garm,
  // or garm retries work that was done.
  constexpr auto kDrainDeadline = std::chrono::seconds(30);
  const SystemdNotifier systemd;
  asio::steady_timer watchdog_timer(io);
  asio::steady_timer drain_timer(io);
  std::function<void(std::chrono::steady_clock::time_point)> drain = [&](auto deadline) {
    if (server.open_connections() == 0 || std::chrono::steady_clock::now() >= deadline) {
      watchdog_timer.cancel();
      io.stop();
      return;
    }
    drain_timer.expires_after(std::chrono::milliseconds(50));
    drain_timer.async_wait([&, deadline](const asio::error_code&) { drain(deadline); });
  };
  asio::signal_set signals(io, SIGINT, SIGTERM, SIGHUP);
  std::function<void(const asio::error_code&, int)> on_signal = [&](const asio::error_code& error,
                                                                    int signal) {
    if (error) {
      return;
    }
    if (signal == SIGHUP) {
      systemd.reloading();
      try {
        server.reload(net::TlsConfig::load(net::TlsConfig::Role::server, tls_files(config.api)));
        log.info("reloaded certificates, key, CA and CRL; new connections use them");
      } catch (const std::exception& e) {
        log.error(std::string("reload failed, keeping the previous certificates: ") + e.what());
      }
      systemd.ready("serving");
      signals.async_wait(on_signal);
      return;
    }
    systemd.stopping();
    log.info("stopping: no new connections; answering the ones in progress");
    server.stop();
    if (guest_server) {
      guest_server->stop();
    }
    drain(std::chrono::steady_clock::now() + kDrainDeadline);
  };
  signals.async_wait(on_signal);

  // The watchdog is fed from the event loop that answers both APIs: if it stalls, systemd
  // restarts the agent.
  std::function<void()> feed_watchdog = [&] {
    systemd.watchdog();
    watchdog_timer.expires_after(*systemd.watchdog_interval());
    watchdog_timer.async_wait([&](const asio::error_code& error) {
      if (!error) {
        feed_watchdog();
      }
    });
  };
  systemd.ready("serving: control API on " + config.api.address + ":" +
                std::to_string(server.port()) +
                (guest_server ? ", guests on " + guest_access.base_url() : std::string()));

  if (systemd.watchdog_interval()) {
    feed_watchdog();
  }

  std::thread second([&io] { io.run(); });
  io.run();
  second.join();
  workers.join();
  relay_workers.join();
  seed_workers.join();
  return 0;
}

}  // namespace garm_edge::agent
