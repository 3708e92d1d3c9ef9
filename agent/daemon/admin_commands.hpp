#pragma once

#include "agent/admin/admin_server.hpp"
#include "agent/base/config.hpp"
#include "agent/images/image_store.hpp"
#include "agent/instances/instance_service.hpp"

namespace garm_edge::agent {

/// What the running agent does for its operator's commands on the admin socket: `images
/// list|pull|remove` on its own image store (a pull follows one under way), `reconcile` as a
/// pass of its own. `images` is null when no image has a source.
AdminServer::Handler admin_commands(const AgentConfig& config, InstanceService& service,
                                    ImageStore* images);

}  // namespace garm_edge::agent
