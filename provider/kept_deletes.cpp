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

// Deletes kept for agents that were down when garm asked: carried out when they answer again, and
// settled before a create of the same name.
namespace garm_edge::provider {

void Provider::carry_out_deferred_deletes() noexcept {
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

void Provider::defer_delete(const AgentClient& agent, const std::string& ref,
                            const std::string& why, const std::string& what) {
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

std::set<std::string> Provider::settle_kept_deletes(const std::string& name) {
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
    const auto reply = reply_of(
        [&] { return agent->call("DELETE", instance_path(name), "", CallKind::probe, deadline); });
    if (reply.answered(200) || reply.not_found()) {
      deferred_->forget(held);
    } else {
      unsettled.insert(agent->name());
    }
  }
  return unsettled;
}

void Provider::pass_over(PlacementPlan& plan, const std::set<std::string>& unsettled,
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
      plan.skipped.push_back(
          {fleet_.agents()[index]->name(), "may still hold the failed " + name +
                                               " (its kept delete could not be carried out yet)"});
    }
  }
  std::erase_if(plan.order, is_unsettled);
}

void Provider::carry_out_deferred_deletes(AgentClient& agent) {
  if (!agent.reached()) {
    return;
  }
  const auto deadline = std::chrono::steady_clock::now() + config_.probe_timeout;
  for (const auto& entry : deferred_->pending(controller_, agent.name(), kDeferredDeletesPerCall)) {
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

std::set<std::string> Provider::deferred_refs(const AgentClient& agent) const {
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

}  // namespace garm_edge::provider
