#include "agent/daemon/admin_commands.hpp"

#include "agent/daemon/image_operations.hpp"
#include "agent/instances/reconcile_loop.hpp"

namespace garm_edge::agent {
namespace {

net::AdminResult refused(const std::string& why) {
  return {.exit_code = 2, .output = "", .error = why};
}

net::AdminResult images_command(const AgentConfig& config, InstanceService& service,
                                ImageStore* images, const net::AdminRequest& request,
                                const net::AdminServer::Progress& progress) {
  if (request.action == "list") {
    return {.exit_code = 0, .output = image_list(config, images), .error = ""};
  }
  if (request.action != "pull" && request.action != "remove") {
    return refused("unknown images action \"" + request.action + "\"");
  }
  if (images == nullptr || !images->pulls(request.name)) {
    return refused("image \"" + request.name + "\" has no source in the agent's config");
  }
  if (request.action == "pull") {
    const auto state = images->follow_pull(
        request.name, [&](const ImagePullState& now) { progress(now.bytes, now.total); });
    return {.exit_code = 0, .output = pulled_line(*images, request.name, state), .error = ""};
  }
  return {
      .exit_code = 0,
      .output = remove_image(*images, request.name,
                             [&](const std::string& path) { return service.base_in_use(path); }),
      .error = ""};
}

net::AdminResult caches_command(const AgentConfig& config, JobCaches* caches,
                                const net::AdminRequest& request) {
  if (caches == nullptr) {
    return request.action == "list" ? net::AdminResult{.exit_code = 0,
                                                       .output = "no [[caches]] are configured\n",
                                                       .error = ""}
                                    : refused("no [[caches]] are configured");
  }
  if (request.action == "list") {
    return {.exit_code = 0, .output = cache_list(caches->store(), SystemClock()), .error = ""};
  }
  if (request.action != "refresh") {
    return refused("unknown caches action \"" + request.action + "\"");
  }
  if (config.find_cache(request.name) == nullptr) {
    return refused("no cache \"" + request.name + "\" is configured");
  }
  const auto outcome = caches->refresher().refresh(request.name);
  if (!outcome.ok) {
    return {.exit_code = 1, .output = "", .error = outcome.error};
  }
  const auto current = caches->store().current(request.name);
  return {.exit_code = 0,
          .output = "cache " + request.name + ": generation " +
                    std::to_string(current ? current->number : 0) +
                    " is current (the refresh took " +
                    std::to_string(static_cast<long>(outcome.seconds)) + " s)\n",
          .error = ""};
}

}  // namespace

net::AdminServer::Handler admin_commands(const AgentConfig& config, InstanceService& service,
                                         ImageStore* images, JobCaches* caches) {
  return [&config, &service, images, caches](
             const net::AdminRequest& request,
             const net::AdminServer::Progress& progress) -> net::AdminResult {
    if (request.command == "images") {
      return images_command(config, service, images, request, progress);
    }
    if (request.command == "caches") {
      return caches_command(config, caches, request);
    }
    if (request.command == "reconcile") {
      const auto report = service.reconcile();
      const auto summary = summarize(report);
      return {.exit_code = report.failures == 0 ? 0 : 1,
              .output = (summary.empty() ? "nothing to do" : summary) + "\n",
              .error = report.failures == 0 ? "" : "the pass had failures: see the agent's log"};
    }
    return refused("unknown command \"" + request.command + "\"");
  };
}

}  // namespace garm_edge::agent
