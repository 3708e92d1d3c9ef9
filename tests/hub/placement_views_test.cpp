// The placement probes a hub answers itself: from each agent's view, never for an agent that
// may hold the instance, and each controller only what the agent would show it.
#include "hub/placement_views.hpp"

#include <cctype>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "wire/error.hpp"

namespace {

using garm_edge::hub::PlacementViews;
const std::string kController = "9dcf590a-1192-4a9c-b3e4-e0902974c2c0";
const std::string kOtherController = "5a3e2b1c-0d9f-4e8a-b7c6-d5e4f3a2b1c0";
namespace wire = garm_edge::wire;
using nlohmann::json;
using namespace std::chrono_literals;

/// An agent's view with a warm guest of kController's, which only kController is shown, and
/// `instances` of kController.
wire::PlacementView view_with(const std::vector<std::string>& instances) {
  wire::PlacementView view;
  view.others.agent_id = "rack1";
  view.others.free.memory_mib = 4096;
  auto own = view.others;
  own.warm.push_back({.controller = kController,
                      .image = "debian-12",
                      .flavor = "small",
                      .ready = 1,
                      .warming = 0});
  view.by_controller[kController] = own;
  for (const auto& name : instances) {
    view.instances.push_back(wire::instance_key(kController, name));
  }
  return view;
}

std::string upper_case(std::string text) {
  for (auto& c : text) {
    c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  }
  return text;
}

/// The warm offers a hub's answer shows, or -1 when the hub leaves the probe to the agent.
int warm_offers_in(const std::optional<std::string>& answer) {
  if (!answer) {
    return -1;
  }
  const auto parsed = wire::parse_placement_answer(*answer);
  CHECK_FALSE(parsed.instance);
  CHECK_FALSE(parsed.create_under_way);
  return static_cast<int>(parsed.capacity.warm.size());
}

}  // namespace

TEST_CASE("the hub answers a probe from a fresh view, and leaves the agent's instances to it",
          "[hub][placement]") {
  PlacementViews views(30s);
  const auto at = PlacementViews::Clock::now();
  views.update("rack1", view_with({"garm-a"}), at);
  // Each controller gets what the agent shows it: the warm guest is kController's alone.
  CHECK(warm_offers_in(views.answer("rack1", kController, "garm-b", at)) == 1);
  CHECK(warm_offers_in(views.answer("rack1", kOtherController, "garm-b", at)) == 0);
  // The agent holds garm-a: only it can answer with the instance (garm's retried create).
  CHECK(warm_offers_in(views.answer("rack1", kController, "garm-a", at)) == -1);
  // Another controller's instance of that name is not this one.
  CHECK(warm_offers_in(views.answer("rack1", kOtherController, "garm-a", at)) == 0);
  // Controller IDs are matched in any case, as the agent does.
  CHECK(warm_offers_in(views.answer("rack1", upper_case(kController), "garm-a", at)) == -1);
  // No view, or one older than allowed: the agent is asked.
  CHECK(warm_offers_in(views.answer("rack2", kController, "garm-b", at)) == -1);
  CHECK(warm_offers_in(views.answer("rack1", kController, "garm-b", at + 31s)) == -1);
  views.forget("rack1");
  CHECK(warm_offers_in(views.answer("rack1", kController, "garm-b", at)) == -1);
}

TEST_CASE("a create relayed through the hub is its agent's to answer until a view shows it",
          "[hub][placement]") {
  PlacementViews views(30s);
  const auto at = PlacementViews::Clock::now();
  views.update("rack1", view_with({}), at);
  views.create_started("rack1", kController, "garm-c");
  CHECK(warm_offers_in(views.answer("rack1", kController, "garm-c", at)) == -1);
  views.create_ended("rack1", kController, "garm-c", true, at + 1s);
  CHECK(warm_offers_in(views.answer("rack1", kController, "garm-c", at + 1s)) == -1);
  // A view asked for before the create ended may not show it yet: the create still counts.
  views.update("rack1", view_with({}), at + 500ms);
  CHECK(warm_offers_in(views.answer("rack1", kController, "garm-c", at + 1s)) == -1);
  // A view asked for after it ended is the agent's word (it was deleted since, say).
  views.update("rack1", view_with({}), at + 2s);
  CHECK(warm_offers_in(views.answer("rack1", kController, "garm-c", at + 2s)) == 1);
  // A create refused before any work made nothing: probes of it are the hub's again.
  views.create_started("rack1", kController, "garm-d");
  views.create_ended("rack1", kController, "garm-d", false, at + 2s);
  CHECK(warm_offers_in(views.answer("rack1", kController, "garm-d", at + 2s)) == 1);
  // Agents removed from the hub are forgotten.
  views.keep_only({"rack2"}, at + 2s);
  CHECK(views.size() == 0);
}

TEST_CASE("a create that ended while the hub held no view of its agent still counts",
          "[hub][placement]") {
  PlacementViews views(30s);
  const auto at = PlacementViews::Clock::now();
  // The agent's first view is asked for while a create of garm-e runs there (the agent took
  // its hold after answering), and arrives after the create ended.
  views.create_started("rack1", kController, "garm-e");
  views.create_ended("rack1", kController, "garm-e", true, at + 1s);
  views.update("rack1", view_with({}), at + 500ms);
  CHECK(warm_offers_in(views.answer("rack1", kController, "garm-e", at + 1s)) == -1);
  CHECK(warm_offers_in(views.answer("rack1", kController, "garm-f", at + 1s)) == 1);
  // Forgotten (a failed view request) and taken again: still the agent's until a later view.
  views.forget("rack1");
  views.update("rack1", view_with({}), at + 800ms);
  CHECK(warm_offers_in(views.answer("rack1", kController, "garm-e", at + 1s)) == -1);
  // A view older than allowed is not used, and what ended long ago is dropped.
  views.keep_only({"rack1"}, at + 40s);
  CHECK(warm_offers_in(views.answer("rack1", kController, "garm-e", at + 40s)) == -1);
}

TEST_CASE("an agent's placement view is refused whole when it is not what an agent sends",
          "[hub][placement][wire]") {
  const auto text = [](const json& instances, const std::string& controller) {
    auto view = json::parse(wire::to_json(view_with({})).dump());
    view["instances"] = instances;
    view["by_controller"] = {{controller, view["others"]}};
    return view.dump();
  };
  CHECK(wire::parse_placement_view(text(json::array({kController + "/garm-a"}), kController))
            .instances.size() == 1);
  const auto upper = upper_case(kController);
  const auto lowered = wire::parse_placement_view(text(json::array({upper + "/x"}), upper));
  CHECK(lowered.instances.front() == kController + "/x");
  CHECK(lowered.by_controller.count(kController) == 1);
  for (const auto& [instances, controller] : std::vector<std::pair<json, std::string>>{
           {json::array({"no-slash"}), kController},
           {json::array({"not-a-uuid/garm-a"}), kController},
           {json::array({kController + "/"}), kController},
           {json::array({kController + "/a\nb"}), kController},
           {json::array({kController + "/" + std::string(256, 'a')}), kController},
           {json::array({1}), kController},
           {json::array(), "*"},
       }) {
    CHECK_THROWS_AS(wire::parse_placement_view(text(instances, controller)), wire::WireError);
  }
  json many = json::array();
  for (std::size_t i = 0; i <= wire::kMaxViewInstances; ++i) {
    many.push_back(kController + "/n" + std::to_string(i));
  }
  CHECK_THROWS_AS(wire::parse_placement_view(text(many, kController)), wire::WireError);
}

TEST_CASE("the hub passes on the capacity as the agent wrote it, with fields it does not know",
          "[hub][placement][skew]") {
  auto document = json::parse(wire::to_json(view_with({})).dump());
  document["others"]["from_a_newer_agent"] = {{"quota", 3}};
  const auto view = wire::parse_placement_view(document.dump());
  PlacementViews views(30s);
  const auto at = PlacementViews::Clock::now();
  views.update("rack1", view, at);
  const auto answer = views.answer("rack1", kOtherController, "garm-a", at);
  REQUIRE(answer);
  CHECK(json::parse(*answer).at("capacity").at("from_a_newer_agent").at("quota") == 3);
  CHECK(warm_offers_in(answer) == 0);
}

TEST_CASE("only an agent that may hold a name has changed when it is deleted by name",
          "[hub][placement]") {
  PlacementViews views(30s);
  const auto at = PlacementViews::Clock::now();
  CHECK(views.may_hold("rack1", kController, "garm-a"));  // no view: it may
  views.update("rack1", view_with({"garm-a"}), at);
  CHECK(views.may_hold("rack1", kController, "garm-a"));
  CHECK_FALSE(views.may_hold("rack1", kController, "garm-b"));
  CHECK_FALSE(views.may_hold("rack1", kOtherController, "garm-a"));
  views.create_started("rack1", kController, "garm-b");
  CHECK(views.may_hold("rack1", kController, "garm-b"));
}

TEST_CASE(
    "a probe that counts a fleet quota is the agent's while its controller's create is "
    "newer than the view",
    "[hub][placement][shares]") {
  PlacementViews views(30s);
  const auto at = PlacementViews::Clock::now();
  views.update("rack1", view_with({}), at);
  views.create_started("rack1", kController, "garm-q1");
  // Another name of the same controller: the view's share is short of garm-q1.
  CHECK(warm_offers_in(views.answer("rack1", kController, "garm-q2", at, true)) == -1);
  CHECK(warm_offers_in(views.answer("rack1", kController, "garm-q2", at, false)) == 1);
  // Another controller's share is not changed by it.
  CHECK(warm_offers_in(views.answer("rack1", kOtherController, "garm-q2", at, true)) == 0);
  views.create_ended("rack1", kController, "garm-q1", true, at + 1s);
  CHECK(warm_offers_in(views.answer("rack1", kController, "garm-q2", at + 1s, true)) == -1);
  // A view asked for after the create ended counts it.
  views.update("rack1", view_with({"garm-q1"}), at + 2s);
  CHECK(warm_offers_in(views.answer("rack1", kController, "garm-q2", at + 2s, true)) == 1);
  // A controller whose ID is a prefix of another's is not taken for it.
  views.create_started("rack1", kController.substr(0, 8), "garm-q3");
  CHECK(warm_offers_in(views.answer("rack1", kController, "garm-q2", at + 2s, true)) == 1);
}

TEST_CASE(
    "a probe that counts a fleet quota is the agent's while its controller's delete is newer "
    "than the view",
    "[hub][placement][shares]") {
  // garm deletes a runner and creates the next at once: a view taken before the delete still
  // counts the deleted instance, and would refuse the create at a full quota.
  PlacementViews views(30s);
  const auto at = PlacementViews::Clock::now();
  views.update("rack1", view_with({"garm-q1"}), at);
  CHECK(warm_offers_in(views.answer("rack1", kController, "garm-q2", at, true)) == 1);
  views.delete_ended("rack1", upper_case(kController), at + 1s);
  CHECK(warm_offers_in(views.answer("rack1", kController, "garm-q2", at + 1s, true)) == -1);
  // Capacity alone may come from the older view: it shows less room, never more.
  CHECK(warm_offers_in(views.answer("rack1", kController, "garm-q2", at + 1s, false)) == 1);
  CHECK(warm_offers_in(views.answer("rack1", kOtherController, "garm-q2", at + 1s, true)) == 0);
  // A view asked for before the delete ended may still show the instance.
  views.update("rack1", view_with({"garm-q1"}), at + 500ms);
  CHECK(warm_offers_in(views.answer("rack1", kController, "garm-q2", at + 1s, true)) == -1);
  views.update("rack1", view_with({}), at + 2s);
  CHECK(warm_offers_in(views.answer("rack1", kController, "garm-q2", at + 2s, true)) == 1);
  // One still not asked for again is dropped once no view of that age is used.
  views.delete_ended("rack1", kController, at + 3s);
  views.keep_only({"rack1"}, at + 40s);
  views.update("rack1", view_with({}), at + 2s);
  CHECK(warm_offers_in(views.answer("rack1", kController, "garm-q2", at + 2s, true)) == 1);
}
