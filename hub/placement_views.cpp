#include "hub/placement_views.hpp"

namespace garm_edge::hub {
namespace {

/// What the agent's `GET .../placement/NAME` answers when it has no such instance: its
/// capacity as it wrote it when there is that text (fields a newer agent adds pass through).
std::string no_instance_answer(const wire::AgentCapacity& capacity, const std::string& text) {
  if (text.empty()) {
    return wire::to_json(wire::PlacementAnswer{.instance = std::nullopt,
                                               .create_under_way = false,
                                               .capacity = capacity})
        .dump();
  }
  return R"({"instance":null,"create_under_way":false,"capacity":)" + text + "}";
}

const std::string& text_of(const std::map<std::string, std::string>& texts,
                           const std::string& controller) {
  static const std::string none;
  const auto found = texts.find(controller);
  return found == texts.end() ? none : found->second;
}

}  // namespace

void PlacementViews::update(const std::string& agent, const wire::PlacementView& view,
                            Clock::time_point at) {
  View kept{.answer_by_controller = {},
            .answer_for_others = no_instance_answer(view.others, view.others_text),
            .instances = {view.instances.begin(), view.instances.end()},
            .taken_at = at};
  for (const auto& [controller, capacity] : view.by_controller) {
    kept.answer_by_controller[controller] =
        no_instance_answer(capacity, text_of(view.by_controller_text, controller));
  }
  std::lock_guard lock(mutex_);
  // Creates that ended before this view was asked for are in it (or were deleted since).
  const auto shown_in_view = [&](const auto& change) {
    return change.first.first == agent && change.second < at;
  };
  std::erase_if(made_, shown_in_view);
  std::erase_if(deleted_, shown_in_view);
  views_[agent] = std::move(kept);
}

void PlacementViews::keep_only(const std::set<std::string>& agents, Clock::time_point now) {
  std::lock_guard lock(mutex_);
  std::erase_if(views_, [&](const auto& view) { return agents.count(view.first) == 0; });
  const auto older_than_any_view = [&](const auto& change) {
    return now - change.second > max_age_;
  };
  std::erase_if(made_, older_than_any_view);
  std::erase_if(deleted_, older_than_any_view);
}

void PlacementViews::forget(const std::string& agent) {
  std::lock_guard lock(mutex_);
  views_.erase(agent);
}

void PlacementViews::create_started(const std::string& agent, const std::string& controller,
                                    const std::string& name) {
  std::lock_guard lock(mutex_);
  ++creating_[{agent, wire::instance_key(controller, name)}];
}

void PlacementViews::create_ended(const std::string& agent, const std::string& controller,
                                  const std::string& name, bool made, Clock::time_point now) {
  const auto key = wire::instance_key(controller, name);
  std::lock_guard lock(mutex_);
  if (const auto found = creating_.find({agent, key});
      found != creating_.end() && --found->second == 0) {
    creating_.erase(found);
  }
  // Until a view asked for later shows it: a retry of the create finds it at once.
  if (made) {
    made_[{agent, key}] = now;
  }
}

void PlacementViews::delete_ended(const std::string& agent, const std::string& controller,
                                  Clock::time_point now) {
  std::lock_guard lock(mutex_);
  const auto key = wire::instance_key(controller, "");
  deleted_[{agent, key.substr(0, key.size() - 1)}] = now;
}

std::optional<std::string> PlacementViews::answer(const std::string& agent,
                                                  const std::string& controller,
                                                  const std::string& name, Clock::time_point now,
                                                  bool fresh_share) const {
  const auto key = wire::instance_key(controller, name);
  const auto owner = key.substr(0, key.find('/'));  // the controller, as agents spell it
  std::lock_guard lock(mutex_);
  const auto view = views_.find(agent);
  if (may_hold_locked(agent, key) || now - view->second.taken_at > max_age_ ||
      (fresh_share && changed_since_view_locked(agent, owner))) {
    return std::nullopt;
  }
  const auto shown = view->second.answer_by_controller.find(owner);
  return shown == view->second.answer_by_controller.end() ? view->second.answer_for_others
                                                          : shown->second;
}

bool PlacementViews::may_hold(const std::string& agent, const std::string& controller,
                              const std::string& name) const {
  std::lock_guard lock(mutex_);
  return may_hold_locked(agent, wire::instance_key(controller, name));
}

bool PlacementViews::may_hold_locked(const std::string& agent, const std::string& key) const {
  const auto view = views_.find(agent);
  return view == views_.end() || view->second.instances.count(key) != 0 ||
         creating_.count({agent, key}) != 0 || made_.count({agent, key}) != 0;
}

bool PlacementViews::changed_since_view_locked(const std::string& agent,
                                               const std::string& controller) const {
  // Keys are "controller/name": this controller's sort together, from "controller/".
  const auto prefix = controller + "/";
  const auto any_of = [&](const auto& entries) {
    const auto first = entries.lower_bound({agent, prefix});
    return first != entries.end() && first->first.first == agent &&
           first->first.second.starts_with(prefix);
  };
  return any_of(creating_) || any_of(made_) || deleted_.count({agent, controller}) != 0;
}

std::optional<PlacementViews::Clock::time_point> PlacementViews::taken_at(
    const std::string& agent) const {
  std::lock_guard lock(mutex_);
  const auto view = views_.find(agent);
  return view == views_.end() ? std::nullopt : std::optional(view->second.taken_at);
}

std::size_t PlacementViews::size() const {
  std::lock_guard lock(mutex_);
  return views_.size();
}

}  // namespace garm_edge::hub
