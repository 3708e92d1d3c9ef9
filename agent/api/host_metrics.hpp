#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "agent/instances/instance_service.hpp"

namespace garm_edge::agent {

/// What may run out on this host, for /metrics: libvirt's state, the capacity the agent gives
/// out (vCPUs, memory, instances, guest addresses), the storage pool's free disk, draining.
/// libvirt unreachable: only garm_edge_libvirt_up 0, never an error of the whole scrape.
std::string render_host_metrics(InstanceService& service);

/// A certificate whose expiry an operator must see coming (the API's, the CA's, the hub's).
struct WatchedCertificate {
  std::string name;
  std::filesystem::path path;
};
/// garm_edge_certificate_expiry_timestamp_seconds per readable certificate; one that cannot be
/// read is left out (its service failed to start or reload, which says so).
std::string render_certificate_metrics(const std::vector<WatchedCertificate>& certificates);

}  // namespace garm_edge::agent
