#pragma once

#include "agent/base/config.hpp"
#include "agent/caches/job_caches.hpp"
#include "agent/images/image_store.hpp"
#include "agent/instances/instance_service.hpp"
#include "net/admin_server.hpp"

namespace garm_edge::agent {

/// What the running agent does for its operator's commands on the admin socket: `images
/// list|pull|remove` on its own image store (a pull follows one under way), `reconcile` as a
/// pass of its own, `caches list|refresh` (a refresh waits for its builder). `images` is null
/// when no image has a source, `caches` when no cache is configured.
net::AdminServer::Handler admin_commands(const AgentConfig& config, InstanceService& service,
                                         ImageStore* images, JobCaches* caches);

}  // namespace garm_edge::agent
