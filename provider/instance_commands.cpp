#include "provider/instance_commands.hpp"

#include <algorithm>
#include <future>
#include <memory>
#include <utility>

#include <nlohmann/json.hpp>

#include "common/text.hpp"
#include "net/https_client.hpp"
#include "wire/agent_capacity.hpp"
#include "wire/error.hpp"
#include "wire/json_fields.hpp"
#include "wire/validate.hpp"

// How one command asks the fleet: at once, under one deadline, and what counts as an answer.
namespace garm_edge::provider {

Provider::Provider(const std::map<std::string, std::string>& environment, ProviderConfig config,
                   TlsConfigCache& tls)
    : env_(environment), config_(std::move(config)), fleet_(config_, &tls) {
  if (!config_.session_dir.empty()) {
    deferred_.emplace(config_.session_dir);
  }
  controller_ = ascii_lower(get("GARM_CONTROLLER_ID"));  // as agents and [[quotas]] spell it
  try {
    wire::validate_uuid(controller_, "GARM_CONTROLLER_ID");
  } catch (const wire::WireError& e) {
    throw CommandFailure(1, e.what());
  }
}

Provider::FleetProbe Provider::probe_fleet(const std::string& name) {
  const auto deadline = std::chrono::steady_clock::now() + config_.probe_timeout;
  // A fleet quota counts the controller's use: a hub must not answer from a view that predates
  // this controller's last create on an agent (docs/shares.md).
  const bool counts_use = config_.find_quota(controller_) != nullptr;
  const auto path = controller_path(controller_) + "/placement/" + percent_encode(name) +
                    (counts_use ? "?share=fresh" : "");
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

std::string Provider::get(const std::string& name) const {
  const auto it = env_.find(name);
  return it == env_.end() ? std::string() : it->second;
}

std::string Provider::instance_path(const std::string& ref) const {
  return controller_path(controller_) + "/instances/" + percent_encode(ref);
}

std::vector<AgentClient*> Provider::all_agents() {
  std::vector<AgentClient*> all;
  for (auto& agent : fleet_.agents()) {
    all.push_back(agent.get());
  }
  return all;
}

std::vector<AgentReply> Provider::ask(const std::vector<AgentClient*>& agents,
                                      const std::string& method, const std::string& path) {
  if (agents.size() == fleet_.agents().size()) {
    // Every agent: those behind a hub in one relay per hub, not a connection each.
    fleet_.fan_out(method, path, CallKind::request);
  }
  return ask(agents,
             [&](AgentClient& agent) { return agent.call(method, path, "", CallKind::request); });
}

std::vector<AgentReply> Provider::ask(const std::vector<AgentClient*>& agents,
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

void Provider::fail_unless_all_answered(const std::vector<AgentClient*>& agents,
                                        const std::vector<AgentReply>& replies,
                                        bool not_found_is_an_answer, const std::string& what) {
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

Provider::Routed Provider::route(const std::string& instance_id) {
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

std::vector<wire::ProviderInstance> Provider::parse_instances(const AgentClient& agent,
                                                              const std::string& body) {
  try {
    return wire::parse_provider_instance_list(body);
  } catch (const wire::WireError& e) {
    throw CommandFailure(1, "agent " + agent.name() + " answered an unusable list: " + e.what());
  }
}

wire::ProviderInstance Provider::checked_for_garm(const AgentClient& agent,
                                                  wire::ProviderInstance instance) {
  if (!instance.status || !wire::is_reportable_by_provider(*instance.status) ||
      instance.name.empty() || instance.provider_id.empty()) {
    throw CommandFailure(1, "agent " + agent.name() + " answered an instance garm would reject");
  }
  instance.provider_id = agent.name() + ":" + instance.provider_id;
  return instance;
}

std::string Provider::print_instance(const AgentClient& agent, const std::string& body) {
  wire::ProviderInstance instance;
  try {
    instance = wire::parse_provider_instance(body);
  } catch (const wire::WireError& e) {
    throw CommandFailure(1,
                         "agent " + agent.name() + " answered an unusable instance: " + e.what());
  }
  return print_instance(agent, std::move(instance));
}

std::string Provider::print_instance(const AgentClient& agent, wire::ProviderInstance instance) {
  return wire::to_go_json_text(wire::to_json(checked_for_garm(agent, std::move(instance))));
}

}  // namespace garm_edge::provider
