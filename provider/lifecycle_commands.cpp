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

// CreateInstance, GetInstance, DeleteInstance, Start and Stop: one instance, on the agent that
// holds it or the one placement chooses.
namespace garm_edge::provider {

Outcome Provider::create(const std::string& stdin_text) {
  wire::BootstrapInstance bootstrap;
  PlacementRequest request;
  try {
    bootstrap = wire::parse_bootstrap_instance(stdin_text);
    request = placement_request_for(bootstrap);
  } catch (const wire::WireError& e) {
    throw CommandFailure(
        1, std::string("CreateInstance: stdin is not a usable BootstrapInstance: ") + e.what());
  }
  // garm creates a failed instance again under its name once its delete exited 0: what a
  // delete kept for that name would remove is the failed attempt's instance. It is removed
  // first wherever its agent answers, so that garm never gets the stale instance back and no
  // kept delete runs after this create.
  const auto unsettled = settle_kept_deletes(bootstrap.name);
  PlacementPlan plan{.warm_first = {}, .order = {0}, .skipped = {}};
  // With one agent there is no choice to make, and the agent itself is idempotent by name
  // and refuses what it has no room for: no probe round trip, unless a fleet quota needs the
  // controller's use.
  const auto* quota = config_.find_quota(controller_);
  if (fleet_.agents().size() > 1 || quota != nullptr) {
    auto probed = probe_fleet(bootstrap.name);
    if (probed.creating_on != nullptr) {
      // garm's retry of a create that has not returned: placing it again would make a second
      // instance. garm retries once more; by then the first has finished or failed.
      throw CommandFailure(1, "agent " + probed.creating_on->name() +
                                  " is still creating instance " + bootstrap.name +
                                  ": not placing it a second time");
    }
    if (probed.holder != nullptr && unsettled.count(probed.holder->name()) == 0) {
      return {0, print_instance(*probed.holder, std::move(probed.held)), ""};
    }
    plan = plan_placement(request, probed.inputs, config_.placement);
    if (const auto over =
            quota != nullptr ? over_fleet_quota(*quota, request, probed.inputs) : std::nullopt) {
      // Binding a warm guest kept for the controller takes nothing more: only those are tried.
      if (plan.warm_first.empty()) {
        throw CommandFailure(1, "CreateInstance " + bootstrap.name + ": " + *over);
      }
      plan.order.clear();
      plan.skipped.push_back({"[[quotas]]", *over});
    }
  }
  pass_over(plan, unsettled, bootstrap.name);
  return create_on_first_taker(bootstrap, std::move(plan));
}

Outcome Provider::get_instance() {
  const auto id = get("GARM_INSTANCE_ID");
  const auto routed = route(id);
  const auto& agents = routed.agents;
  const auto& ref = routed.ref;
  const auto replies = ask(agents, "GET", instance_path(ref));
  for (std::size_t i = 0; i < replies.size(); ++i) {
    if (replies[i].answered(200)) {
      return {0, print_instance(*agents[i], replies[i].response->body), ""};
    }
  }
  fail_unless_all_answered(agents, replies, true, "GetInstance " + id);
  return not_found(id);
}

Outcome Provider::delete_instance() {
  // Absent everywhere is success: garm deletes by name after failed creates.
  const auto id = get("GARM_INSTANCE_ID");
  const auto routed = route(id);
  const auto& agents = routed.agents;
  const auto replies = ask(agents, "DELETE", instance_path(routed.ref));
  // An agent that answered anything but 200 refused: garm retries. One that could not be
  // reached may still hold the instance, but garm creates nothing for the slot until this
  // exits 0, so one dead host would hold every failed create: its delete is kept and carried
  // out by the next call that reaches it.
  std::vector<std::size_t> unreachable;
  std::string failures;
  for (std::size_t i = 0; i < replies.size(); ++i) {
    if (!replies[i].response) {
      unreachable.push_back(i);
    } else if (!replies[i].answered(200)) {
      failures += "\n  " + agents[i]->describe(*replies[i].response);
    }
  }
  if (!failures.empty()) {
    throw CommandFailure(1, "DeleteInstance " + id + ": not every agent answered:" + failures);
  }
  for (const auto i : unreachable) {
    defer_delete(*agents[i], routed.ref, replies[i].error, "DeleteInstance " + id);
  }
  return {0, "", ""};
}

Outcome Provider::start_or_stop(bool start) {
  const std::string action = start ? "/start" : "/stop?force=true";
  const auto id = get("GARM_INSTANCE_ID");
  const auto routed = route(id);
  const auto& agents = routed.agents;
  const auto& ref = routed.ref;
  const auto replies = ask(agents, "POST", instance_path(ref) + action);
  if (std::any_of(replies.begin(), replies.end(),
                  [](const AgentReply& reply) { return reply.answered(200); })) {
    return {0, "", ""};
  }
  fail_unless_all_answered(agents, replies, true,
                           std::string(start ? "StartInstance " : "StopInstance ") + id);
  return not_found(id);
}

Outcome Provider::create_on_first_taker(const wire::BootstrapInstance& bootstrap,
                                        PlacementPlan plan) {
  const auto body = wire::to_go_json_text(wire::to_json(bootstrap));
  const auto path = controller_path(controller_) + "/instances";
  std::vector<std::pair<std::size_t, std::string>> attempts;
  for (const auto index : plan.warm_first) {
    attempts.emplace_back(index, path + "?warm_only=true");
  }
  for (const auto index : plan.order) {
    attempts.emplace_back(index, path);
  }
  for (const auto& attempt : attempts) {
    auto& agent = *fleet_.agents()[attempt.first];
    const auto& target = attempt.second;  // not a structured binding: clang 14 cannot capture one
    const auto reply = reply_of([&] { return agent.call("POST", target, body, CallKind::create); });
    if (reply.answered(200)) {
      return {0, print_instance(agent, reply.response->body), ""};
    }
    const auto code = reply.response ? error_code_of(*reply.response) : "";
    const bool refused = code == "no_capacity" || code == "draining";
    const auto why = reply.response ? agent.describe(*reply.response) : reply.error;
    if (!refused && reply.request_sent) {
      // It may have taken effect: trying another agent could make a second instance.
      throw CommandFailure(1, why);
    }
    plan.skipped.push_back({agent.name(), why});
  }
  throw CommandFailure(1, "no agent can take instance " + bootstrap.name + " (image " +
                              bootstrap.image + ", flavor " + bootstrap.flavor +
                              "):" + describe_skipped(plan.skipped));
}

}  // namespace garm_edge::provider
