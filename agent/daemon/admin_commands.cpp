#include "agent/daemon/admin_commands.hpp"

#include "agent/daemon/image_operations.hpp"
#include "agent/instances/reconcile_loop.hpp"

namespace garm_edge::agent {
namespace {

AdminResult refused(const std::string& why) {
  return {.exit_code = 2, .output = "", .error = why};
}

AdminResult images_command(const AgentConfig& config, InstanceService& service, ImageStore* images,
                           const AdminRequest& request, const AdminServer::Progress& progress) {
  if (request.action == "list") {
    return {.exit_code = 0, .output = image_list(config, images), .error = ""};
  }
  if (request.action != "pull" && request.action != "remove") {
    return refused("unknown images action \"" + request.action + "\"");
  }
  if (images == nullptr || !images->pulls(request.image)) {
    return refused("image \"" + request.image + "\" has no source in the agent's config");
  }
  if (request.action == "pull") {
    const auto state = images->follow_pull(
        request.image, [&](const ImagePullState& now) { progress(now.bytes, now.total); });
    return {.exit_code = 0, .output = pulled_line(*images, request.image, state), .error = ""};
  }
  return {
      .exit_code = 0,
      .output = remove_image(*images, request.image,
                             [&](const std::string& path) { return service.base_in_use(path); }),
      .error = ""};
}

}  // namespace

AdminServer::Handler admin_commands(const AgentConfig& config, InstanceService& service,
                                    ImageStore* images) {
  return [&config, &service, images](const AdminRequest& request,
                                     const AdminServer::Progress& progress) -> AdminResult {
    if (request.command == "images") {
      return images_command(config, service, images, request, progress);
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
