#include "wire/placement_view.hpp"

#include <algorithm>

#include "common/text.hpp"
#include "wire/error.hpp"
#include "wire/json_fields.hpp"
#include "wire/validate.hpp"

namespace garm_edge::wire {
using nlohmann::ordered_json;

bool is_instance_key(std::string_view key) {
  const auto slash = key.find('/');
  if (slash == std::string_view::npos || !is_uuid(key.substr(0, slash))) {
    return false;
  }
  const auto name = key.substr(slash + 1);
  return !name.empty() && name.size() <= 255 && std::none_of(name.begin(), name.end(), [](char c) {
    return static_cast<unsigned char>(c) < 0x20 || c == 0x7f;
  });
}

const AgentCapacity& PlacementView::shown_to(const std::string& controller) const {
  const auto found = by_controller.find(ascii_lower(controller));
  return found == by_controller.end() ? others : found->second;
}

std::string instance_key(std::string_view controller, std::string_view name) {
  return ascii_lower(controller) + "/" + std::string(name);
}

ordered_json to_json(const PlacementView& view) {
  ordered_json by_controller = ordered_json::object();
  for (const auto& [controller, capacity] : view.by_controller) {
    by_controller[controller] = to_json(capacity);
  }
  return {{"by_controller", by_controller},
          {"others", to_json(view.others)},
          {"instances", view.instances}};
}

PlacementView parse_placement_view(std::string_view json_text) {
  const auto document = parse_json_text(json_text, "placement view");
  const ObjectReader in(document, "");
  PlacementView view;
  const auto* by_controller = in.find("by_controller");
  if (by_controller == nullptr || !by_controller->is_object()) {
    throw WireError("by_controller", "expected an object");
  }
  if (by_controller->size() > kMaxViewControllers) {
    throw WireError("by_controller",
                    "more than " + std::to_string(kMaxViewControllers) + " controllers");
  }
  for (const auto& [controller, capacity] : by_controller->items()) {
    if (!is_uuid(controller)) {
      throw WireError("by_controller", "\"" + printable_excerpt(controller) + "\" is no UUID");
    }
    view.by_controller[ascii_lower(controller)] =
        agent_capacity_from_json(capacity, "by_controller." + controller);
    view.by_controller_text[ascii_lower(controller)] = capacity.dump();
  }
  const auto* others = in.find("others");
  if (others == nullptr || !others->is_object()) {
    throw WireError("others", "expected an object");
  }
  view.others = agent_capacity_from_json(*others, "others");
  view.others_text = others->dump();
  auto instances = in.string_list("instances").value_or(std::vector<std::string>{});
  if (instances.size() > kMaxViewInstances) {
    throw WireError("instances", "more than " + std::to_string(kMaxViewInstances));
  }
  for (auto& key : instances) {
    if (!is_instance_key(key)) {
      throw WireError("instances", "\"" + printable_excerpt(key) + "\" is no controller/name");
    }
    const auto slash = key.find('/');
    key = instance_key(key.substr(0, slash), key.substr(slash + 1));
  }
  std::sort(instances.begin(), instances.end());
  view.instances = std::move(instances);
  return view;
}

}  // namespace garm_edge::wire
