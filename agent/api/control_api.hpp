#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "agent/base/config.hpp"
#include "agent/instances/instance_service.hpp"
#include "hypervisor/hypervisor.hpp"
#include "net/http_request.hpp"
#include "net/http_response.hpp"
#include "net/tls_server.hpp"

namespace garm_edge::agent {

/// Counters for /metrics (Prometheus text format).
class ApiMetrics {
 public:
  void record(const std::string& route, const std::string& method, int status,
              std::chrono::steady_clock::duration elapsed);
  void record_error(std::string_view code);
  std::string render(const std::map<std::string, std::size_t>& instances_by_state) const;

 private:
  mutable std::mutex mutex_;
  std::map<std::tuple<std::string, std::string, int>, std::uint64_t> requests_;
  std::map<std::string, std::pair<double, std::uint64_t>> latency_;  // route: sum seconds, count
  std::map<std::string, std::uint64_t> errors_;
};

/// The versioned JSON API over the instance service. Transport-free: it maps one parsed
/// request and the caller's verified identity to one response, so it is tested without TLS.
/// Runs on worker threads (commands block on libvirt).
class ControlApi {
 public:
  ControlApi(const AgentConfig& config, InstanceService& service,
             hypervisor::Hypervisor& hypervisor);

  net::HttpResponse handle(const net::HttpRequest& request, const net::PeerIdentity& peer);
  /// More Prometheus text for /metrics (the guest service's counters).
  void add_metrics_source(std::function<std::string()> source) {
    metrics_sources_.push_back(std::move(source));
  }

 private:
  /// The route's answer, or its failure as a JSON error.
  net::HttpResponse answer(const net::HttpRequest& request, const net::PeerIdentity& peer,
                           std::string& route_name);
  net::HttpResponse route(const net::HttpRequest& request, const net::PeerIdentity& peer,
                          std::string& route_name);
  net::HttpResponse controller_route(const net::HttpRequest& request,
                                     const std::vector<std::string>& parts,
                                     std::string& route_name);
  net::HttpResponse metrics();
  std::string metrics_text();

  const AgentConfig& config_;
  InstanceService& service_;
  hypervisor::Hypervisor& hypervisor_;
  ApiMetrics metrics_;
  std::vector<std::function<std::string()>> metrics_sources_;
};

}  // namespace garm_edge::agent
