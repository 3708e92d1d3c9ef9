#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/text.hpp"
#include "provider/agent_client.hpp"
#include "provider/commands.hpp"
#include "provider/deferred_deletes.hpp"
#include "provider/fleet.hpp"
#include "provider/hubs.hpp"
#include "provider/placement.hpp"
#include "provider/provider_config.hpp"
#include "wire/bootstrap.hpp"
#include "wire/provider_instance.hpp"

// One garm command's run over the fleet (provider/commands.cpp dispatches to it): the
// instance lifecycle (lifecycle_commands.cpp), the lists (list_commands.cpp), the deletes kept
// for agents that were down (kept_deletes.cpp), and how the fleet is asked
// (instance_commands.cpp).
namespace garm_edge::provider {

/// A failure to report on stderr with an exit code (1, or 30 for "not found").
struct CommandFailure : std::runtime_error {
  CommandFailure(int code, const std::string& message)
      : std::runtime_error(message), exit_code(code) {}
  int exit_code;
};

inline std::string controller_path(const std::string& controller) {
  return "/v1/controllers/" + controller;
}

inline std::string list_path(const std::string& controller, const std::string& pool) {
  return controller_path(controller) + "/pools/" + percent_encode(pool) + "/instances";
}

/// The fleet as one command of garm's sees it: its agents, the controller it acts for (from
/// GARM_CONTROLLER_ID), the deletes kept for agents that were down.
class Provider {
 public:
  Provider(const std::map<std::string, std::string>& environment, ProviderConfig config,
           TlsConfigCache& tls);
  Outcome create(const std::string& stdin_text);
  Outcome get_instance();
  Outcome delete_instance();

  /// The deletes kept for agents that this process reached, carried out within the probe
  /// deadline (the rest wait for the next call); never throws, never changes garm's answer.
  void carry_out_deferred_deletes() noexcept;
  Outcome start_or_stop(bool start);

  /// Hands the answers a hub gave with its list of agents to those agents.
  void take_prefetched(const HubPrefetch& prefetch, std::vector<wire::RelayedAnswer>& answers);
  Outcome list_instances();
  Outcome remove_all();

 private:
  struct FleetProbe {
    AgentClient* holder = nullptr;  // an agent that has the instance already
    wire::ProviderInstance held;
    AgentClient* creating_on = nullptr;  // an agent still creating it
    std::vector<PlacementInput> inputs;
  };

  /// Every agent at once, under one deadline, in one request each: does it have `name`, and
  /// what can it take?
  FleetProbe probe_fleet(const std::string& name);

  /// Asks the planned agents in order; one that refuses with no_capacity or draining, or
  /// cannot be reached at all, passes the instance on to the next.
  Outcome create_on_first_taker(const wire::BootstrapInstance& bootstrap, PlacementPlan plan);
  void defer_delete(const AgentClient& agent, const std::string& ref, const std::string& why,
                    const std::string& what);

  /// Carries out the deletes kept for `name` on the agents that answer, and names the agents
  /// whose kept delete could not be carried out: they may still hold the failed attempt's
  /// instance, so this create passes them over. Fails when another call holds one.
  std::set<std::string> settle_kept_deletes(const std::string& name);

  /// Agents in `unsettled` take no part in this create of `name`: each is skipped with why.
  void pass_over(PlacementPlan& plan, const std::set<std::string>& unsettled,
                 const std::string& name);

  static constexpr std::size_t kDeferredDeletesPerCall = 64;
  void carry_out_deferred_deletes(AgentClient& agent);

  /// The refs of `agent`'s instances that garm has asked to delete: not listed to garm again.
  std::set<std::string> deferred_refs(const AgentClient& agent) const;
  std::string get(const std::string& name) const;
  std::string instance_path(const std::string& ref) const;
  std::vector<AgentClient*> all_agents();

  /// `call` on each of `agents` at once (the whole fleet's replies, filtered when fewer).
  std::vector<AgentReply> ask(const std::vector<AgentClient*>& agents,
                              const std::function<net::HttpsResponse(AgentClient&)>& call);
  /// `method` `path` (no body) of each of `agents`, as a request.
  std::vector<AgentReply> ask(const std::vector<AgentClient*>& agents, const std::string& method,
                              const std::string& path);

  /// Fails, naming every agent that did not answer 200 (or, when `not_found_is_an_answer`,
  /// that it has no such instance): an instance on an agent that is down is not gone.
  void fail_unless_all_answered(const std::vector<AgentClient*>& agents,
                                const std::vector<AgentReply>& replies, bool not_found_is_an_answer,
                                const std::string& what);

  /// "<agent>:<uuid>" goes to that agent; a bare instance name (garm's fallback before it has
  /// a provider ID) is asked of every agent.
  struct Routed {
    std::vector<AgentClient*> agents;
    std::string ref;  // what the agents know the instance by: its UUID or garm's name
  };
  Routed route(const std::string& instance_id);
  static std::vector<wire::ProviderInstance> parse_instances(const AgentClient& agent,
                                                             const std::string& body);

  /// garm rejects an instance without name, provider ID or one of its four statuses; one bad
  /// element fails a whole list, so refuse here with a clear message instead.
  static wire::ProviderInstance checked_for_garm(const AgentClient& agent,
                                                 wire::ProviderInstance instance);
  static std::string print_instance(const AgentClient& agent, const std::string& body);
  static std::string print_instance(const AgentClient& agent, wire::ProviderInstance instance);
  const std::map<std::string, std::string>& env_;
  ProviderConfig config_;
  Fleet fleet_;
  std::string controller_;
  std::optional<DeferredDeletes> deferred_;
};

}  // namespace garm_edge::provider
