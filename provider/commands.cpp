#include "provider/commands.hpp"

#include <algorithm>
#include <future>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <sys/stat.h>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/text.hpp"
#include "net/https_client.hpp"
#include "provider/agent_client.hpp"
#include "provider/deferred_deletes.hpp"
#include "provider/fleet.hpp"
#include "provider/hubs.hpp"
#include "provider/placement.hpp"
#include "provider/provider_config.hpp"
#include "wire/agent_capacity.hpp"
#include "wire/base64.hpp"
#include "wire/bootstrap.hpp"
#include "wire/error.hpp"
#include "wire/json_fields.hpp"
#include "wire/provider_instance.hpp"
#include "wire/schemas.hpp"
#include "wire/validate.hpp"

#ifndef GARM_EDGE_VERSION
#define GARM_EDGE_VERSION "0.0.0"
#endif

namespace garm_edge::provider {
namespace {

/// A failure to report on stderr with an exit code (1, or 30 for "not found").
struct CommandFailure : std::runtime_error {
  CommandFailure(int code, const std::string& message)
      : std::runtime_error(message), exit_code(code) {}
  int exit_code;
};

std::string controller_path(const std::string& controller) {
  return "/v1/controllers/" + controller;
}

std::string list_path(const std::string& controller, const std::string& pool) {
  return controller_path(controller) + "/pools/" + percent_encode(pool) + "/instances";
}

class Provider {
 public:
  Provider(const std::map<std::string, std::string>& environment, ProviderConfig config,
           TlsConfigCache& tls)
      : env_(environment), config_(std::move(config)), fleet_(config_, &tls) {
    if (!config_.session_dir.empty()) {
      deferred_.emplace(config_.session_dir);
    }
    controller_ = get("GARM_CONTROLLER_ID");
    try {
      wire::validate_uuid(controller_, "GARM_CONTROLLER_ID");
    } catch (const wire::WireError& e) {
      throw CommandFailure(1, e.what());
    }
  }

  Outcome create(const std::string& stdin_text) {
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
    // and refuses what it has no room for: no probe round trip.
    if (fleet_.agents().size() > 1) {
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
    }
    pass_over(plan, unsettled, bootstrap.name);
    return create_on_first_taker(bootstrap, std::move(plan));
  }

  Outcome get_instance() {
    const auto id = get("GARM_INSTANCE_ID");
    const auto routed = route(id);
    const auto& agents = routed.agents;
    const auto& ref = routed.ref;
    const auto replies = ask(agents, [&](AgentClient& agent) {
      return agent.call("GET", instance_path(ref), "", CallKind::request);
    });
    for (std::size_t i = 0; i < replies.size(); ++i) {
      if (replies[i].answered(200)) {
        return {0, print_instance(*agents[i], replies[i].response->body), ""};
      }
    }
    fail_unless_all_answered(agents, replies, true, "GetInstance " + id);
    throw CommandFailure(kExitNotFound, "no instance " + id);
  }

  Outcome delete_instance() {
    // Absent everywhere is success: garm deletes by name after failed creates.
    const auto id = get("GARM_INSTANCE_ID");
    const auto routed = route(id);
    const auto& agents = routed.agents;
    const auto replies = ask(agents, [&](AgentClient& agent) {
      return agent.call("DELETE", instance_path(routed.ref), "", CallKind::request);
    });
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

  /// The deletes kept for agents that this process reached, carried out within the probe
  /// deadline (the rest wait for the next call); never throws, never changes garm's answer.
  void carry_out_deferred_deletes() noexcept {
    if (!deferred_) {
      return;
    }
    try {
      if (!deferred_->any_pending(controller_)) {
        return;
      }
      fleet_.each_at_once<bool>([&](AgentClient& agent) {
        try {
          carry_out_deferred_deletes(agent);
        } catch (const std::exception&) {
          // kept for the next call
        }
        return true;
      });
    } catch (const std::exception&) {
      // a thread that could not start: the entries wait for the next call
    }
  }

  Outcome start_or_stop(bool start) {
    const std::string action = start ? "/start" : "/stop?force=true";
    const auto id = get("GARM_INSTANCE_ID");
    const auto routed = route(id);
    const auto& agents = routed.agents;
    const auto& ref = routed.ref;
    const auto replies = ask(agents, [&](AgentClient& agent) {
      return agent.call("POST", instance_path(ref) + action, "", CallKind::request);
    });
    if (std::any_of(replies.begin(), replies.end(),
                    [](const AgentReply& reply) { return reply.answered(200); })) {
      return {0, "", ""};
    }
    fail_unless_all_answered(agents, replies, true,
                             std::string(start ? "StartInstance " : "StopInstance ") + id);
    throw CommandFailure(kExitNotFound, "no instance " + id);
  }

  /// Hands the answers a hub gave with its list of agents to those agents.
  void take_prefetched(const HubPrefetch& prefetch, std::vector<wire::RelayedAnswer>& answers) {
    for (auto& answer : answers) {
      if (auto* agent = fleet_.find(answer.agent)) {
        if (answer.status != 0) {
          agent->prefetched(prefetch.method, prefetch.path,
                            {.status = answer.status, .body = std::move(answer.body)});
        } else {
          agent->prefetch_failed(prefetch.method, prefetch.path, std::move(answer.body),
                                 answer.sent);
        }
      }
    }
  }

  Outcome list_instances() {
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

  Outcome remove_all() {
    const auto replies =
        fleet_.request_all("DELETE", controller_path(controller_) + "/instances", CallKind::create);
    fail_unless_all_answered(all_agents(), replies, false, "RemoveAllInstances");
    return {0, "", ""};
  }

 private:
  struct FleetProbe {
    AgentClient* holder = nullptr;  // an agent that has the instance already
    wire::ProviderInstance held;
    AgentClient* creating_on = nullptr;  // an agent still creating it
    std::vector<PlacementInput> inputs;
  };

  /// Every agent at once, under one deadline, in one request each: does it have `name`, and
  /// what can it take?
  FleetProbe probe_fleet(const std::string& name) {
    const auto deadline = std::chrono::steady_clock::now() + config_.probe_timeout;
    const auto path = controller_path(controller_) + "/placement/" + percent_encode(name);
    fleet_.fan_out("GET", path, CallKind::probe, deadline);
    const auto replies = fleet_.ask_all(
        [&](AgentClient& agent) { return agent.call("GET", path, "", CallKind::probe, deadline); });
    FleetProbe probe;
    for (std::size_t i = 0; i < replies.size(); ++i) {
      auto& agent = *fleet_.agents()[i];
      const auto& reply = replies[i];
      PlacementInput input{.agent = &agent.endpoint(), .capacity = std::nullopt, .error = ""};
      if (!reply.response) {
        input.error = reply.error;
      } else if (reply.response->status != 200) {
        input.error = agent.describe(*reply.response);
      } else {
        try {
          auto answer = wire::parse_placement_answer(reply.response->body);
          if (answer.instance && probe.holder == nullptr) {
            probe.holder = &agent;
            probe.held = std::move(*answer.instance);
          }
          if (answer.create_under_way) {
            probe.creating_on = &agent;
          }
          input.capacity = std::move(answer.capacity);
        } catch (const wire::WireError& e) {
          input.error = "agent " + agent.name() +
                        " answered an unusable placement answer: " + printable_excerpt(e.what());
        }
      }
      probe.inputs.push_back(std::move(input));
    }
    return probe;
  }

  /// Asks the planned agents in order; one that refuses with no_capacity or draining, or
  /// cannot be reached at all, passes the instance on to the next.
  Outcome create_on_first_taker(const wire::BootstrapInstance& bootstrap, PlacementPlan plan) {
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
      const auto reply =
          reply_of([&] { return agent.call("POST", target, body, CallKind::create); });
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

  void defer_delete(const AgentClient& agent, const std::string& ref, const std::string& why,
                    const std::string& what) {
    if (!deferred_) {
      throw CommandFailure(1, what + ": " + why +
                                  "\n  (with session_dir in the provider config, a delete on an "
                                  "unreachable agent is kept for it and garm can move on)");
    }
    try {
      deferred_->record({.controller = controller_,
                         .agent = agent.name(),
                         .ref = ref,
                         .url = agent.endpoint().url,
                         .recorded_at = std::chrono::system_clock::now(),
                         .reason = printable_excerpt(why, 400)});
    } catch (const std::exception& e) {
      throw CommandFailure(
          1, what + ": " + why + "\n  and the delete cannot be kept for later: " + e.what());
    }
  }

  /// Carries out the deletes kept for `name` on the agents that answer, and names the agents
  /// whose kept delete could not be carried out: they may still hold the failed attempt's
  /// instance, so this create passes them over. Fails when another call holds one.
  std::set<std::string> settle_kept_deletes(const std::string& name) {
    std::set<std::string> unsettled;
    if (!deferred_) {
      return unsettled;
    }
    auto kept =
        deferred_->hold_all(controller_, name, config_.probe_timeout + std::chrono::seconds(1));
    if (!kept.complete) {
      throw CommandFailure(
          1, "a delete kept for " + name + " is being carried out by another call: try again");
    }
    const auto deadline = std::chrono::steady_clock::now() + config_.probe_timeout;
    for (const auto& held : kept.held) {
      auto* agent = fleet_.find(held.entry().agent);
      if (agent == nullptr) {
        continue;  // not an agent this create can reach
      }
      const auto reply = reply_of([&] {
        return agent->call("DELETE", instance_path(name), "", CallKind::probe, deadline);
      });
      if (reply.answered(200) || reply.not_found()) {
        deferred_->forget(held);
      } else {
        unsettled.insert(agent->name());
      }
    }
    return unsettled;
  }

  /// Agents in `unsettled` take no part in this create of `name`: each is skipped with why.
  void pass_over(PlacementPlan& plan, const std::set<std::string>& unsettled,
                 const std::string& name) {
    if (unsettled.empty()) {
      return;
    }
    const auto is_unsettled = [&](std::size_t index) {
      return unsettled.count(fleet_.agents()[index]->name()) > 0;
    };
    std::erase_if(plan.warm_first, is_unsettled);
    for (const auto index : plan.order) {
      if (is_unsettled(index)) {
        plan.skipped.push_back({fleet_.agents()[index]->name(),
                                "may still hold the failed " + name +
                                    " (its kept delete could not be carried out yet)"});
      }
    }
    std::erase_if(plan.order, is_unsettled);
  }

  static constexpr std::size_t kDeferredDeletesPerCall = 64;

  void carry_out_deferred_deletes(AgentClient& agent) {
    if (!agent.reached()) {
      return;
    }
    const auto deadline = std::chrono::steady_clock::now() + config_.probe_timeout;
    for (const auto& entry :
         deferred_->pending(controller_, agent.name(), kDeferredDeletesPerCall)) {
      if (std::chrono::steady_clock::now() >= deadline) {
        return;
      }
      const auto held = deferred_->try_hold(entry);
      if (!held) {
        continue;  // another process deletes it, or garm creates the name again
      }
      const auto reply = reply_of([&] {
        return agent.call("DELETE", instance_path(entry.ref), "", CallKind::probe, deadline);
      });
      if (!reply.response) {
        return;  // unreachable again: the rest wait too
      }
      if (reply.answered(200) || reply.not_found()) {
        deferred_->forget(*held);
      }  // else refused for this instance: kept, and the next ones are still tried
    }
  }

  /// The refs of `agent`'s instances that garm has asked to delete: not listed to garm again.
  std::set<std::string> deferred_refs(const AgentClient& agent) const {
    std::set<std::string> refs;
    if (deferred_) {
      try {
        for (auto& entry : deferred_->pending(controller_, agent.name())) {
          refs.insert(std::move(entry.ref));
        }
      } catch (const std::exception&) {
        // an agent name that cannot have entries
      }
    }
    return refs;
  }

  std::string get(const std::string& name) const {
    const auto it = env_.find(name);
    return it == env_.end() ? std::string() : it->second;
  }

  std::string instance_path(const std::string& ref) const {
    return controller_path(controller_) + "/instances/" + percent_encode(ref);
  }

  std::vector<AgentClient*> all_agents() {
    std::vector<AgentClient*> all;
    for (auto& agent : fleet_.agents()) {
      all.push_back(agent.get());
    }
    return all;
  }

  /// `call` on each of `agents` at once (the whole fleet's replies, filtered when fewer).
  std::vector<AgentReply> ask(const std::vector<AgentClient*>& agents,
                              const std::function<net::HttpsResponse(AgentClient&)>& call) {
    if (agents.size() == fleet_.agents().size()) {
      return fleet_.ask_all(call);
    }
    std::vector<AgentReply> replies;
    for (auto* agent : agents) {
      replies.push_back(reply_of([&] { return call(*agent); }));
    }
    return replies;
  }

  /// Fails, naming every agent that did not answer 200 (or, when `not_found_is_an_answer`,
  /// that it has no such instance): an instance on an agent that is down is not gone.
  void fail_unless_all_answered(const std::vector<AgentClient*>& agents,
                                const std::vector<AgentReply>& replies, bool not_found_is_an_answer,
                                const std::string& what) {
    std::string failures;
    for (std::size_t i = 0; i < replies.size(); ++i) {
      const auto& reply = replies[i];
      if (!reply.response) {
        failures += "\n  " + reply.error;
      } else if (!reply.answered(200) && !(not_found_is_an_answer && reply.not_found())) {
        failures += "\n  " + agents[i]->describe(*reply.response);
      }
    }
    if (!failures.empty()) {
      throw CommandFailure(1, what + ": not every agent answered:" + failures);
    }
  }

  /// "<agent>:<uuid>" goes to that agent; a bare instance name (garm's fallback before it has
  /// a provider ID) is asked of every agent.
  struct Routed {
    std::vector<AgentClient*> agents;
    std::string ref;  // what the agents know the instance by: its UUID or garm's name
  };
  Routed route(const std::string& instance_id) {
    if (instance_id.empty()) {
      throw CommandFailure(1, "GARM_INSTANCE_ID is not set");
    }
    const auto colon = instance_id.rfind(':');
    if (colon != std::string::npos && wire::is_uuid(instance_id.substr(colon + 1))) {
      if (auto* agent = fleet_.find(instance_id.substr(0, colon))) {
        return {{agent}, instance_id.substr(colon + 1)};
      }
      // Not "not found": garm would drop its record while the VM lives on an agent this config
      // no longer names.
      throw CommandFailure(1, "provider ID " + instance_id + " names no configured agent");
    }
    return {all_agents(), instance_id};
  }

  static std::vector<wire::ProviderInstance> parse_instances(const AgentClient& agent,
                                                             const std::string& body) {
    try {
      return wire::parse_provider_instance_list(body);
    } catch (const wire::WireError& e) {
      throw CommandFailure(1, "agent " + agent.name() + " answered an unusable list: " + e.what());
    }
  }

  /// garm rejects an instance without name, provider ID or one of its four statuses; one bad
  /// element fails a whole list, so refuse here with a clear message instead.
  static wire::ProviderInstance checked_for_garm(const AgentClient& agent,
                                                 wire::ProviderInstance instance) {
    if (!instance.status || !wire::is_reportable_by_provider(*instance.status) ||
        instance.name.empty() || instance.provider_id.empty()) {
      throw CommandFailure(1, "agent " + agent.name() + " answered an instance garm would reject");
    }
    instance.provider_id = agent.name() + ":" + instance.provider_id;
    return instance;
  }

  static std::string print_instance(const AgentClient& agent, const std::string& body) {
    wire::ProviderInstance instance;
    try {
      instance = wire::parse_provider_instance(body);
    } catch (const wire::WireError& e) {
      throw CommandFailure(1,
                           "agent " + agent.name() + " answered an unusable instance: " + e.what());
    }
    return print_instance(agent, std::move(instance));
  }

  static std::string print_instance(const AgentClient& agent, wire::ProviderInstance instance) {
    return wire::to_go_json_text(wire::to_json(checked_for_garm(agent, std::move(instance))));
  }

  const std::map<std::string, std::string>& env_;
  ProviderConfig config_;
  Fleet fleet_;
  std::string controller_;
  std::optional<DeferredDeletes> deferred_;
};

Outcome validate_pool_info(const std::map<std::string, std::string>& env) {
  const auto it = env.find("GARM_POOL_EXTRASPECS");
  if (it == env.end() || it->second.empty()) {
    return {0, "", ""};
  }
  const auto decoded = wire::base64_decode(it->second);
  if (!decoded) {
    throw CommandFailure(1, "GARM_POOL_EXTRASPECS is not base64");
  }
  const auto specs = wire::parse_json_text(*decoded, "GARM_POOL_EXTRASPECS");
  if (specs.is_null()) {
    return {0, "", ""};
  }
  wire::validate_extra_specs(specs);
  try {
    wire::validate_extra_spec_keys(specs);
  } catch (const wire::WireError& e) {
    throw CommandFailure(1, e.what());
  }
  return {0, "", ""};
}

Outcome run_instance_command(Provider& provider, const std::string& command,
                             const std::function<std::string()>& read_stdin) {
  if (command == "CreateInstance")
    return provider.create(read_stdin());
  if (command == "DeleteInstance")
    return provider.delete_instance();
  if (command == "GetInstance")
    return provider.get_instance();
  if (command == "ListInstances")
    return provider.list_instances();
  if (command == "RemoveAllInstances")
    return provider.remove_all();
  return provider.start_or_stop(command == "StartInstance");
}

/// ListInstances asks every agent the same thing: a hub is asked it with its list of agents.
std::optional<HubPrefetch> hub_prefetch_for(const std::string& command,
                                            const std::map<std::string, std::string>& env,
                                            std::vector<wire::RelayedAnswer>& answers) {
  const auto controller = env.find("GARM_CONTROLLER_ID");
  const auto pool = env.find("GARM_POOL_ID");
  if (command != "ListInstances" || controller == env.end() || pool == env.end()) {
    return std::nullopt;
  }
  try {
    wire::validate_uuid(controller->second, "GARM_CONTROLLER_ID");
  } catch (const wire::WireError&) {
    return std::nullopt;  // refused with its reason before anything is asked
  }
  return HubPrefetch{.method = "GET",
                     .path = list_path(controller->second, pool->second),
                     .timeout = std::chrono::seconds(60),
                     .answers = &answers};
}

Outcome dispatch(const std::map<std::string, std::string>& env,
                 const std::function<std::string()>& read_stdin) {
  const auto find = [&env](const std::string& name) {
    const auto it = env.find(name);
    return it == env.end() ? std::string() : it->second;
  };
  const auto command = find("GARM_COMMAND");
  if (command == "GetVersion") {
    return {0, GARM_EDGE_VERSION, ""};
  }
  if (command == "GetSupportedInterfaceVersions") {
    return {0, R"(["v0.1.0","v0.1.1"])", ""};
  }
  if (command == "GetConfigJSONSchema") {
    return {0, provider_config_json_schema(), ""};
  }
  if (command == "GetExtraSpecsJSONSchema") {
    return {0, wire::extra_specs_json_schema(), ""};
  }
  const auto version = find("GARM_INTERFACE_VERSION");
  if (!version.empty() && version != "v0.1.0" && version != "v0.1.1") {
    throw CommandFailure(1, "unsupported GARM_INTERFACE_VERSION \"" + version + "\"");
  }
  if (command == "ValidatePoolInfo") {
    return validate_pool_info(env);
  }
  static const std::set<std::string> kInstanceCommands = {
      "CreateInstance",     "DeleteInstance", "GetInstance", "ListInstances",
      "RemoveAllInstances", "StartInstance",  "StopInstance"};
  if (kInstanceCommands.count(command) == 0) {
    throw CommandFailure(
        1, command.empty() ? "GARM_COMMAND is not set" : "unknown command \"" + command + "\"");
  }
  const auto config_file = find("GARM_PROVIDER_CONFIG_FILE");
  if (config_file.empty()) {
    throw CommandFailure(1, "GARM_PROVIDER_CONFIG_FILE is not set");
  }
  TlsConfigCache tls;  // one per process: the hub's list and the agents' calls share it
  std::vector<wire::RelayedAnswer> prefetched;
  const auto prefetch = hub_prefetch_for(command, env, prefetched);
  Provider provider(env, load_fleet_config(config_file, tls, prefetch), tls);
  if (prefetch) {
    provider.take_prefetched(*prefetch, prefetched);
  }
  try {
    auto outcome = run_instance_command(provider, command, read_stdin);
    provider.carry_out_deferred_deletes();
    return outcome;
  } catch (...) {
    provider.carry_out_deferred_deletes();
    throw;
  }
}

}  // namespace

Outcome run_command(const std::map<std::string, std::string>& environment,
                    const std::function<std::string()>& read_stdin) {
  try {
    return dispatch(environment, read_stdin);
  } catch (const CommandFailure& e) {
    return {e.exit_code, "", std::string("garm-provider-edge: ") + e.what() + "\n"};
  } catch (const std::exception& e) {
    return {1, "", std::string("garm-provider-edge: ") + e.what() + "\n"};
  }
}

}  // namespace garm_edge::provider
