#include <algorithm>
#include <future>
#include <memory>
#include <utility>

#include <nlohmann/json.hpp>

#include "net/https_client.hpp"
#include "provider/instance_commands.hpp"
#include "wire/agent_capacity.hpp"
#include "wire/error.hpp"
#include "wire/json_fields.hpp"
#include "wire/validate.hpp"

// ListInstances and RemoveAllInstances over every agent (or a hub's list of them, answered at
// once).
namespace garm_edge::provider {

void Provider::take_prefetched(const HubPrefetch& prefetch,
                               std::vector<wire::RelayedAnswer>& answers) {
  for (auto& answer : answers) {
    if (auto* agent = fleet_.find(answer.agent)) {
      if (answer.status != 0) {
        agent->prefetched(prefetch.method, prefetch.path,
                          {.status = answer.status, .body = std::move(answer.body)});
      } else {
        agent->prefetch_failed(prefetch.method, prefetch.path, std::move(answer.body), answer.sent);
      }
    }
  }
}

Outcome Provider::list_instances() {
  const auto path = list_path(controller_, get("GARM_POOL_ID"));
  // Each agent's answer is read and rewritten for garm in its own thread, beside the others.
  struct Part {
    AgentReply reply;
    std::string elements;  // garm's JSON of its instances, comma-separated
    std::string failure;
  };
  fleet_.fan_out("GET", path, CallKind::request);
  const auto parts = fleet_.each_at_once<Part>([&](AgentClient& agent) {
    Part part{reply_of([&] { return agent.call("GET", path, "", CallKind::request); }), "", ""};
    if (part.reply.answered(200)) {
      try {
        const auto deleted = deferred_refs(agent);
        for (auto& instance : parse_instances(agent, part.reply.response->body)) {
          if (deleted.count(instance.provider_id) + deleted.count(instance.name) > 0) {
            continue;  // garm deleted it; the next call carries the delete out
          }
          part.elements +=
              (part.elements.empty() ? "" : ",") +
              wire::to_go_json_text(wire::to_json(checked_for_garm(agent, std::move(instance))));
        }
      } catch (const CommandFailure& e) {
        part.failure = e.what();
      }
    }
    return part;
  });
  std::vector<AgentReply> replies;
  std::string all;
  for (const auto& part : parts) {
    replies.push_back(part.reply);
    if (!part.failure.empty()) {
      throw CommandFailure(1, part.failure);
    }
    all += (all.empty() || part.elements.empty() ? "" : ",") + part.elements;
  }
  // Complete from every agent, or a failure: garm takes a missing runner for a gone one.
  fail_unless_all_answered(all_agents(), replies, false, "ListInstances");
  return {0, "[" + all + "]", ""};
}

Outcome Provider::remove_all() {
  const auto replies =
      fleet_.request_all("DELETE", controller_path(controller_) + "/instances", CallKind::create);
  fail_unless_all_answered(all_agents(), replies, false, "RemoveAllInstances");
  return {0, "", ""};
}

}  // namespace garm_edge::provider
