#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "agent/api/api_command.hpp"
#include "agent/api/api_metrics.hpp"
#include "agent/base/config.hpp"
#include "agent/base/fair_work_queue.hpp"
#include "agent/instances/instance_service.hpp"
#include "net/http_request.hpp"
#include "net/http_response.hpp"
#include "net/tls_server.hpp"

namespace garm_edge::agent {

/// The versioned JSON API over the instance service. Transport-free: it maps one parsed
/// request and the caller's verified identity to one response, so its routes are tested
/// directly (tests/agent/api) as well as over mutual TLS. Commands run on worker threads (they
/// block on libvirt).
/// The TLS server's settings from [api] (address, port, who may connect, connection shares).
net::TlsServerOptions tls_server_options(const ApiConfig& api);

/// Which controllers' warm guests an answer may show.
using ControllerFilter = std::function<bool(const std::string& controller)>;

class ControlApi {
 public:
  ControlApi(const AgentConfig& config, InstanceService& service);

  /// Never throws: every failure is a JSON error (see docs/error-policy.md).
  net::HttpResponse handle(const net::HttpRequest& request, const net::PeerIdentity& peer);
  /// Answers through `respond`. /healthz reads only what the libvirt monitor last saw, so it is
  /// answered at once on the calling I/O thread: a health probe gets its answer even while every
  /// worker waits on libvirt. Everything else runs on `workers`, shared per client certificate
  /// (one controller's commands stuck on libvirt leave the other controllers workers).
  void dispatch(net::HttpRequest request, net::PeerIdentity peer, net::TlsServer::Respond respond,
                FairWorkQueue& workers);
  /// More Prometheus text for /metrics (the guest service's counters).
  void add_metrics_source(std::function<std::string()> source) {
    metrics_sources_.push_back(std::move(source));
  }

  /// One per command: its answer on success; failures are thrown as ServiceError or
  /// wire::WireError and rendered by handle().
  net::HttpResponse run(const Health&);
  net::HttpResponse run(const ShowMetrics&);
  net::HttpResponse run(const ListImages&);
  net::HttpResponse run(const ListFlavors&);
  net::HttpResponse run(const ShowCapacity&, const ControllerFilter& shown);
  net::HttpResponse run(const ShowPlacementView&);
  net::HttpResponse run(const ListWarm&, const ControllerFilter& shown);
  net::HttpResponse run(const SetDraining& command);
  net::HttpResponse run(const PullImage& command);
  net::HttpResponse run(const RefreshCache& command, const ControllerFilter& allowed);
  net::HttpResponse run(const ExtraSpecsSchema&);
  net::HttpResponse run(const ConfigSchema&);
  net::HttpResponse run(const CreateInstance& command);
  net::HttpResponse run(const DryRunCreate& command);
  net::HttpResponse run(const GetInstance& command);
  net::HttpResponse run(const ShowPlacement& command);
  net::HttpResponse run(const GetGuest& command);
  net::HttpResponse run(const ListInstances& command);
  net::HttpResponse run(const ListEvents& command);
  net::HttpResponse run(const DeleteInstance& command);
  net::HttpResponse run(const DeleteAllInstances& command);
  net::HttpResponse run(const StartInstance& command);
  net::HttpResponse run(const StopInstance& command);
  net::HttpResponse run(const ValidatePool& command);

 private:
  /// The route's answer, or its failure as a JSON error.
  net::HttpResponse answer(const net::HttpRequest& request, const net::PeerIdentity& peer,
                           std::string_view& route_name);
  /// Matches, authorizes, parses and runs the request's command.
  net::HttpResponse route(const net::HttpRequest& request, const net::PeerIdentity& peer,
                          std::string_view& route_name);
  /// Whether the peer acts for every controller (controllers = ["*"], and through a hub, the
  /// hub vouches for every one): what reading /metrics, draining and pulls take.
  bool sees_every_controller(const std::vector<std::string>& identities,
                             const net::PeerIdentity& peer) const;

  const AgentConfig& config_;
  InstanceService& service_;
  ApiMetrics metrics_;
  std::vector<std::function<std::string()>> metrics_sources_;
};

}  // namespace garm_edge::agent
