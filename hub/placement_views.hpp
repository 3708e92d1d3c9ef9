#pragma once

#include <chrono>
#include <cstddef>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "wire/placement_view.hpp"

namespace garm_edge::hub {

/// What the hub knows of each agent's placement view (wire::PlacementView), so that a
/// provider's placement probe of every agent costs a relayed request only to the agents that
/// may hold the instance: the others' answers are the hub's, made from a view at most `max_age`
/// old. An agent without a fresh view, one that holds or is creating the instance, and one a
/// create of it is relayed to right now are asked themselves. Thread-safe.
class PlacementViews {
 public:
  using Clock = std::chrono::steady_clock;

  explicit PlacementViews(std::chrono::milliseconds max_age) : max_age_(max_age) {}

  /// `agent`'s view, asked for at `at`: the instances of creates that ended since are kept.
  void update(const std::string& agent, const wire::PlacementView& view, Clock::time_point at);
  /// Forgets the views of agents not in `agents` (removed from the hub), and creates that
  /// ended longer ago than a view may be old.
  void keep_only(const std::set<std::string>& agents, Clock::time_point now);
  /// The agent's view is gone (it was removed, or refused to give one): it is asked itself.
  void forget(const std::string& agent);
  /// A create of `controller`'s instance `name` was relayed to `agent`, and its answer came
  /// (`made`: the instance may exist there: anything but a refusal before any work).
  void create_started(const std::string& agent, const std::string& controller,
                      const std::string& name);
  void create_ended(const std::string& agent, const std::string& controller,
                    const std::string& name, bool made, Clock::time_point now);
  /// A delete of `controller`'s instances relayed to `agent` got its answer: the view's share
  /// of `controller` there may count an instance gone since, until a view asked for later.
  void delete_ended(const std::string& agent, const std::string& controller, Clock::time_point now);

  /// The agent's answer to a placement probe of `controller`'s instance `name`, as the agent
  /// would give it when it has no such instance; nothing when only the agent can tell.
  /// `fresh_share`: also nothing while a create of `controller` there is under way, or a
  /// create or delete of its instances ended after the view was asked for (the view's share
  /// would be short of that create, or still count what was deleted).
  std::optional<std::string> answer(const std::string& agent, const std::string& controller,
                                    const std::string& name, Clock::time_point now,
                                    bool fresh_share = false) const;
  /// Whether the agent may hold `controller`'s instance `name`: its view, or a create of it
  /// relayed through the hub, says so, or there is no view to tell.
  bool may_hold(const std::string& agent, const std::string& controller,
                const std::string& name) const;
  /// When the agent's view was last taken; nothing without one.
  std::optional<Clock::time_point> taken_at(const std::string& agent) const;
  std::size_t size() const;

 private:
  bool may_hold_locked(const std::string& agent, const std::string& key) const;
  /// Is a create of `controller` on `agent` under way, or a create or delete ended after its
  /// view was asked for?
  bool changed_since_view_locked(const std::string& agent, const std::string& controller) const;

  struct View {
    std::map<std::string, std::string> answer_by_controller;  // placement answer JSON text
    std::string answer_for_others;
    std::set<std::string> instances;
    Clock::time_point taken_at;
  };

  std::chrono::milliseconds max_age_;
  mutable std::mutex mutex_;
  std::map<std::string, View> views_;
  /// Relayed creates in flight, by agent and instance key.
  std::map<std::pair<std::string, std::string>, std::size_t> creating_;
  /// Relayed creates that ended, by agent and instance key, and when: an instance the next view
  /// may not show yet (it was asked for before the create took its place, or there is none).
  std::map<std::pair<std::string, std::string>, Clock::time_point> made_;
  /// Relayed deletes that ended, by agent and controller, and when.
  std::map<std::pair<std::string, std::string>, Clock::time_point> deleted_;
};

}  // namespace garm_edge::hub
