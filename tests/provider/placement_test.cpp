#include "provider/placement.hpp"

#include <map>
#include <set>

#include <catch2/catch.hpp>

#include "wire/agent_capacity.hpp"

using namespace garm_edge;
using namespace garm_edge::provider;

namespace {

const std::string kController = "9dcf590a-1192-4a9c-b3e4-e0902974c2c0";

AgentEndpoint endpoint(const std::string& name, unsigned weight = 100,
                       std::vector<std::string> labels = {}) {
  return {.name = name,
          .url = "https://" + name + ":8443",
          .ca = "/ca",
          .certificate = "/crt",
          .key = "/key",
          .weight = weight,
          .labels = std::move(labels)};
}

/// An agent with debian-12 (amd64) and a 2 vCPU / 2048 MiB flavor, and `free` memory left.
wire::AgentCapacity capacity(std::uint64_t free_memory_mib, std::uint64_t free_vcpus = 16,
                             wire::OsArch arch = wire::OsArch::amd64) {
  wire::AgentCapacity c;
  c.limit = {.vcpus = 32, .memory_mib = 65536, .instances = 0};
  c.free = {.vcpus = free_vcpus, .memory_mib = free_memory_mib, .instances = 0};
  wire::ImageOffer image;
  image.name = "debian-12";
  image.os_type = wire::OsType::linux;
  image.os_name = "debian";
  image.os_version = "12";
  image.arch = arch;
  c.images = {image};
  c.flavors = {{.name = "small", .vcpus = 2, .memory_mib = 2048, .disk_gib = 20}};
  return c;
}

PlacementRequest small_debian(std::optional<wire::OsArch> arch = wire::OsArch::amd64,
                              const std::string& name = "garm-abc") {
  return {.name = name,
          .image = "debian-12",
          .flavor = "small",
          .arch = arch,
          .os_type = wire::OsType::linux,
          .labels = {},
          .shape = {},
          .priority = std::nullopt};
}

std::vector<std::string> names(const PlacementPlan& plan, const std::vector<PlacementInput>& in) {
  std::vector<std::string> out;
  for (const auto index : plan.order) {
    out.push_back(in[index].agent->name);
  }
  return out;
}

std::string reason_of(const PlacementPlan& plan, const std::string& agent) {
  for (const auto& skipped : plan.skipped) {
    if (skipped.agent == agent) {
      return skipped.reason;
    }
  }
  return "(not skipped)";
}

}  // namespace

TEST_CASE("spread puts the instance where the most memory is free", "[placement]") {
  const auto a = endpoint("a");
  const auto b = endpoint("b");
  const auto c = endpoint("c");
  // More than one instance's memory (2048 MiB) apart: strictly by free memory.
  const std::vector<PlacementInput> inputs = {
      {&a, capacity(8192), ""}, {&b, capacity(30000), ""}, {&c, capacity(4096), ""}};
  const auto plan = plan_placement(small_debian(), inputs, Placement::spread);
  CHECK(names(plan, inputs) == std::vector<std::string>{"b", "a", "c"});
  CHECK(plan.skipped.empty());
}

TEST_CASE("spread breaks near-ties by the instance's name: a burst spreads, a retry repeats",
          "[placement]") {
  const auto a = endpoint("a");
  const auto b = endpoint("b");
  const auto c = endpoint("c");
  // a and b within one instance's memory of each other, c far behind.
  const std::vector<PlacementInput> inputs = {
      {&a, capacity(20000), ""}, {&b, capacity(19000), ""}, {&c, capacity(4096), ""}};
  std::map<std::string, int> first_choice;
  for (int i = 0; i < 40; ++i) {
    const auto name = "garm-burst" + std::to_string(i);
    const auto chosen = names(
        plan_placement(small_debian(wire::OsArch::amd64, name), inputs, Placement::spread), inputs);
    CHECK(chosen.back() == "c");
    CHECK(chosen ==
          names(plan_placement(small_debian(wire::OsArch::amd64, name), inputs, Placement::spread),
                inputs));
    ++first_choice[chosen.front()];
  }
  CHECK(first_choice["a"] >= 10);
  CHECK(first_choice["b"] >= 10);
  CHECK(first_choice.count("c") == 0);
}

TEST_CASE("a burst of names alike but for their ends spreads over many tied agents",
          "[placement]") {
  std::vector<AgentEndpoint> endpoints;
  for (int i = 0; i < 32; ++i) {
    endpoints.push_back(endpoint("f" + std::to_string(100 + i).substr(1)));
  }
  std::vector<PlacementInput> inputs;
  for (const auto& agent : endpoints) {
    inputs.push_back({&agent, capacity(8192), ""});
  }
  std::set<std::string> first_choices;
  for (int i = 0; i < 32; ++i) {
    const auto name = "garm-fleet-" + std::to_string(100 + i).substr(1);
    first_choices.insert(
        names(plan_placement(small_debian(wire::OsArch::amd64, name), inputs, Placement::spread),
              inputs)
            .front());
  }
  // 32 names on 32 equal agents at random take about 20 of them; FNV-1a's order took 13.
  CHECK(first_choices.size() >= 16);
}

TEST_CASE("pack fills the highest weight first, then config order, whatever is free",
          "[placement]") {
  const auto a = endpoint("a", 100);
  const auto b = endpoint("b", 100);
  const auto c = endpoint("c", 500);
  const std::vector<PlacementInput> inputs = {
      {&a, capacity(2048), ""}, {&b, capacity(60000), ""}, {&c, capacity(4096), ""}};
  CHECK(names(plan_placement(small_debian(), inputs, Placement::pack), inputs) ==
        std::vector<std::string>{"c", "a", "b"});
}

TEST_CASE("spread scales free memory by weight", "[placement]") {
  const auto light = endpoint("light", 50);
  const auto heavy = endpoint("heavy", 200);
  const std::vector<PlacementInput> inputs = {{&light, capacity(20000), ""},
                                              {&heavy, capacity(8000), ""}};
  CHECK(names(plan_placement(small_debian(), inputs, Placement::spread), inputs) ==
        std::vector<std::string>{"heavy", "light"});
}

TEST_CASE("every agent that cannot take the instance is skipped with its reason", "[placement]") {
  const auto down = endpoint("down");
  const auto draining = endpoint("draining");
  const auto arm = endpoint("arm");
  const auto full = endpoint("full");
  const auto noflavor = endpoint("noflavor");
  const auto slots = endpoint("slots");
  const auto fits = endpoint("fits");
  auto draining_capacity = capacity(30000);
  draining_capacity.draining = true;
  auto noflavor_capacity = capacity(30000);
  noflavor_capacity.flavors.clear();
  auto slots_capacity = capacity(30000);
  slots_capacity.limit.instances = 4;
  slots_capacity.free.instances = 0;
  const std::vector<PlacementInput> inputs = {{&down, std::nullopt, "agent down: cannot connect"},
                                              {&draining, draining_capacity, ""},
                                              {&arm, capacity(30000, 16, wire::OsArch::arm64), ""},
                                              {&full, capacity(30000, 1), ""},
                                              {&noflavor, noflavor_capacity, ""},
                                              {&slots, slots_capacity, ""},
                                              {&fits, capacity(2048, 2), ""}};
  const auto plan = plan_placement(small_debian(), inputs, Placement::spread);
  CHECK(names(plan, inputs) == std::vector<std::string>{"fits"});
  CHECK(reason_of(plan, "down") == "unreachable: agent down: cannot connect");
  CHECK(reason_of(plan, "draining") == "draining");
  CHECK(reason_of(plan, "arm") == "image \"debian-12\" is arm64, not amd64");
  CHECK(reason_of(plan, "full").starts_with("no capacity: flavor small needs 2 vCPUs, 2048 MiB"));
  CHECK(reason_of(plan, "noflavor") == "no flavor \"small\"");
  CHECK(reason_of(plan, "slots").find("no instance slot left of 4") != std::string::npos);
  CHECK(describe_skipped(plan.skipped).find("\n  draining: draining") != std::string::npos);
}

TEST_CASE("an arm64 request goes only to agents with an arm64 image of that name", "[placement]") {
  const auto x86 = endpoint("x86");
  const auto arm = endpoint("arm");
  const std::vector<PlacementInput> inputs = {
      {&x86, capacity(60000), ""}, {&arm, capacity(1 << 12, 16, wire::OsArch::arm64), ""}};
  const auto plan = plan_placement(small_debian(wire::OsArch::arm64), inputs, Placement::spread);
  CHECK(names(plan, inputs) == std::vector<std::string>{"arm"});
}

TEST_CASE("a pool's agent_labels pick the agents that carry every one of them", "[placement]") {
  const auto plain = endpoint("plain");
  const auto gpu = endpoint("gpu", 100, {"gpu", "rack1"});
  const auto rack2 = endpoint("rack2", 100, {"gpu", "rack2"});
  const std::vector<PlacementInput> inputs = {
      {&plain, capacity(60000), ""}, {&gpu, capacity(4096), ""}, {&rack2, capacity(60000), ""}};
  wire::BootstrapInstance bootstrap;
  bootstrap.image = "debian-12";
  bootstrap.flavor = "small";
  bootstrap.extra_specs = nlohmann::json{{"agent_labels", {"gpu", "rack1"}}};
  const auto request = placement_request_for(bootstrap);
  const auto plan = plan_placement(request, inputs, Placement::spread);
  CHECK(names(plan, inputs) == std::vector<std::string>{"gpu"});
  CHECK(reason_of(plan, "plain") == "no label \"gpu\"");
  CHECK(reason_of(plan, "rack2") == "no label \"rack1\"");

  bootstrap.extra_specs = nlohmann::json{{"agent_labels", "gpu"}};
  CHECK_THROWS(placement_request_for(bootstrap));
}

TEST_CASE("agents with a ready warm guest of the image and flavor are asked first, even when full",
          "[placement][warm]") {
  const auto roomy = endpoint("roomy");
  const auto full = endpoint("full", 500);
  const auto warming = endpoint("warming");
  const auto other_flavor = endpoint("other-flavor");
  const auto roomy_warm = endpoint("roomy-warm");
  auto full_capacity = capacity(0, 0);
  full_capacity.warm = {{.controller = kController,
                         .image = "debian-12",
                         .flavor = "small",
                         .ready = 1,
                         .warming = 0}};
  auto warming_capacity = capacity(8192);
  warming_capacity.warm = {{.controller = kController,
                            .image = "debian-12",
                            .flavor = "small",
                            .ready = 0,
                            .warming = 2}};
  auto other_capacity = capacity(4096);
  other_capacity.warm = {{.controller = kController,
                          .image = "debian-12",
                          .flavor = "large",
                          .ready = 3,
                          .warming = 0}};
  auto roomy_warm_capacity = capacity(2048);
  roomy_warm_capacity.warm = {{.controller = kController,
                               .image = "debian-12",
                               .flavor = "small",
                               .ready = 2,
                               .warming = 0}};
  const std::vector<PlacementInput> inputs = {{&roomy, capacity(30000), ""},
                                              {&full, full_capacity, ""},
                                              {&warming, warming_capacity, ""},
                                              {&other_flavor, other_capacity, ""},
                                              {&roomy_warm, roomy_warm_capacity, ""}};
  const auto warm_names = [&](const PlacementPlan& plan) {
    std::vector<std::string> out;
    for (const auto index : plan.warm_first) {
      out.push_back(inputs[index].agent->name);
    }
    return out;
  };
  // Spread: the most free memory first among the warm ones too; pack: the highest weight.
  const auto spread = plan_placement(small_debian(), inputs, Placement::spread);
  CHECK(warm_names(spread) == std::vector<std::string>{"roomy-warm", "full"});
  CHECK(names(spread, inputs) ==
        std::vector<std::string>{"roomy", "warming", "other-flavor", "roomy-warm"});
  CHECK(reason_of(spread, "full").starts_with("no capacity"));  // no cold create there
  const auto pack = plan_placement(small_debian(), inputs, Placement::pack);
  CHECK(warm_names(pack) == std::vector<std::string>{"full", "roomy-warm"});
  // Once its guest is taken, or while it drains, an agent has none to offer.
  full_capacity.warm.front().ready = 0;
  CHECK(plan_placement(small_debian(), {{&full, full_capacity, ""}}, Placement::pack)
            .warm_first.empty());
  full_capacity.warm.front().ready = 1;
  full_capacity.draining = true;
  const std::vector<PlacementInput> drained = {{&full, full_capacity, ""}};
  const auto plan = plan_placement(small_debian(), drained, Placement::pack);
  CHECK(plan.warm_first.empty());
  CHECK(reason_of(plan, "full") == "draining");
}

TEST_CASE("version skew: warm binding is asked only of agents that offer it", "[placement][skew]") {
  const auto agent = endpoint("a");
  auto offered = capacity(4096);
  offered.warm = {{.controller = kController,
                   .image = "debian-12",
                   .flavor = "small",
                   .ready = 1,
                   .warming = 0}};
  // An agent older than the features list offers the baseline, which binds warm guests.
  CHECK(plan_placement(small_debian(), {{&agent, offered, ""}}, Placement::spread)
            .warm_first.size() == 1);
  offered.features = wire::kAgentFeatures;
  CHECK(plan_placement(small_debian(), {{&agent, offered, ""}}, Placement::spread)
            .warm_first.size() == 1);
  // One whose list leaves it out is not asked to bind; it still takes cold creates.
  offered.features = {"hub-tunnel"};
  const auto plan = plan_placement(small_debian(), {{&agent, offered, ""}}, Placement::spread);
  CHECK(plan.warm_first.empty());
  CHECK(plan.order.size() == 1);
  // Features survive the wire, and an answer without them reads as none.
  CHECK(wire::parse_agent_capacity(wire::to_json(offered).dump()).features ==
        std::vector<std::string>{"hub-tunnel"});
  auto json = wire::to_json(offered);
  json.erase("features");
  CHECK(wire::parse_agent_capacity(json.dump()).features.empty());
}

TEST_CASE(
    "an agent with no free guest address is skipped for a cold create, whatever its memory, "
    "and its ready warm guest is still asked",
    "[placement]") {
  const auto out = endpoint("out");
  const auto roomy = endpoint("roomy");
  auto out_capacity = capacity(60000);
  out_capacity.addresses = wire::AddressAmount{.total = 98, .held = 3, .resting = 95, .free = 0};
  auto roomy_capacity = capacity(4096);
  roomy_capacity.addresses = wire::AddressAmount{.total = 98, .held = 0, .resting = 0, .free = 98};
  std::vector<PlacementInput> inputs = {{&out, out_capacity, ""}, {&roomy, roomy_capacity, ""}};
  const auto plan = plan_placement(small_debian(), inputs, Placement::spread);
  CHECK(names(plan, inputs) == std::vector<std::string>{"roomy"});
  CHECK(reason_of(plan, "out") ==
        "no free guest address: 3 held, 95 resting after a delete, of 98");
  CHECK(plan.warm_first.empty());

  // A ready warm guest holds its address already: binding it needs none.
  inputs.front().capacity->warm = {{.controller = kController,
                                    .image = "debian-12",
                                    .flavor = "small",
                                    .ready = 1,
                                    .warming = 0}};
  CHECK(plan_placement(small_debian(), inputs, Placement::spread).warm_first ==
        std::vector<std::size_t>{0});
}

TEST_CASE("the capacity answer carries guest addresses, an agent that sends none has none",
          "[placement]") {
  auto original = capacity(1234);
  CHECK_FALSE(wire::parse_agent_capacity(wire::to_json(original).dump()).addresses);
  CHECK_FALSE(wire::parse_agent_capacity(R"({"addresses":null})").addresses);
  original.addresses = wire::AddressAmount{.total = 98, .held = 2, .resting = 95, .free = 1};
  CHECK(wire::parse_agent_capacity(wire::to_json(original).dump()).addresses == original.addresses);
  CHECK_THROWS(wire::parse_agent_capacity(R"({"addresses":{"free":-1}})"));
  CHECK_THROWS(wire::parse_agent_capacity(R"({"addresses":[]})"));
}

TEST_CASE("the capacity answer reads back as it was written", "[placement]") {
  auto original = capacity(1234, 5);
  original.agent_id = "rack1";
  original.machine = "aarch64";
  original.draining = true;
  original.instances_by_state = {{"running", 3}, {"shutoff", 1}};
  const auto text = wire::to_json(original).dump();
  const auto back = wire::parse_agent_capacity(text);
  CHECK(back.agent_id == "rack1");
  CHECK(back.machine == "aarch64");
  CHECK(back.draining);
  CHECK(back.free == original.free);
  CHECK(back.limit == original.limit);
  CHECK(back.instances_by_state == original.instances_by_state);
  CHECK(back.find_image("debian-12")->arch == wire::OsArch::amd64);
  CHECK(back.find_flavor("small")->memory_mib == 2048);
  CHECK(back.warm_ready("debian-12", "small") == 0);
  original.warm = {{.controller = kController,
                    .image = "debian-12",
                    .flavor = "small",
                    .ready = 2,
                    .warming = 1}};
  const auto warm_back = wire::parse_agent_capacity(wire::to_json(original).dump());
  REQUIRE(warm_back.warm.size() == 1);
  CHECK(warm_back.warm.front().warming == 1);
  CHECK(warm_back.warm.front().controller == kController);
  CHECK(warm_back.warm_ready("debian-12", "small") == 2);
  CHECK(warm_back.warm_ready("debian-12", "large") == 0);
  CHECK_THROWS(wire::parse_agent_capacity(R"({"free":{"vcpus":-1}})"));
  const wire::PlacementAnswer answer{
      .instance = std::nullopt, .create_under_way = true, .capacity = original};
  const auto answer_back = wire::parse_placement_answer(wire::to_json(answer).dump());
  CHECK(answer_back.create_under_way);
  CHECK_FALSE(answer_back.instance);
  CHECK(answer_back.capacity.agent_id == "rack1");
  CHECK_THROWS(wire::parse_agent_capacity(R"({"images":{}})"));
}

namespace {

/// An agent that offers pool shapes: nvme scratch disks up to 100 GiB, network lab, roots up to
/// 40 GiB, amd64 guests on `virt_type`, nested virtualization when `nested`.
wire::AgentCapacity shaped_capacity(const std::string& virt_type, bool nested = false) {
  auto c = capacity(30000);
  c.features = wire::kAgentFeatures;
  c.shapes = {.virt_types = {{"amd64", virt_type}},
              .nested_virtualization = nested,
              .max_root_disk_gib = 40,
              .scratch_pools = {{.name = "nvme", .max_disk_gib = 100}},
              .networks = {"lab"}};
  return c;
}

PlacementRequest shaped_request(const nlohmann::json& shape) {
  auto request = small_debian();
  request.shape = wire::parse_pool_shape(shape);
  return request;
}

}  // namespace

TEST_CASE("a pool's shape goes only to agents that can give it, each other skipped with why",
          "[placement][shapes]") {
  const auto kvm = endpoint("kvm");
  const auto tcg = endpoint("tcg");
  auto old = shaped_capacity("kvm");
  old.features = {"warm-bind", "hub-tunnel", "capacity-features", "image-pull", "caches"};
  const auto old_agent = endpoint("old");
  const std::vector<PlacementInput> inputs = {{&kvm, shaped_capacity("kvm"), ""},
                                              {&tcg, shaped_capacity("qemu"), ""},
                                              {&old_agent, old, ""}};
  const auto placed = [&](const nlohmann::json& shape) {
    return plan_placement(shaped_request(shape), inputs, Placement::spread);
  };
  auto plan =
      placed({{"root_disk_gib", 30}, {"scratch_disks", {{{"pool", "nvme"}, {"size_gib", 50}}}}});
  CHECK(names(plan, inputs) == std::vector<std::string>{"kvm", "tcg"});
  CHECK_THAT(reason_of(plan, "old"), Catch::Contains("knows no pool shapes"));
  CHECK_THAT(reason_of(placed({{"root_disk_gib", 41}}), "kvm"), Catch::Contains("root disk of 41"));
  CHECK_THAT(reason_of(placed({{"scratch_disks", {{{"pool", "sata"}, {"size_gib", 1}}}}}), "kvm"),
             Catch::Contains("no scratch pool \"sata\""));
  CHECK_THAT(reason_of(placed({{"scratch_disks", {{{"pool", "nvme"}, {"size_gib", 101}}}}}), "kvm"),
             Catch::Contains("at most 100 GiB"));
  CHECK_THAT(reason_of(placed({{"networks", {"dmz"}}}), "kvm"), Catch::Contains("no network"));
  plan = placed({{"virt_type", "kvm"}});
  CHECK(names(plan, inputs) == std::vector<std::string>{"kvm"});
  CHECK_THAT(reason_of(plan, "tcg"), Catch::Contains("no KVM for amd64 guests"));
  CHECK_THAT(reason_of(placed({{"nested_virtualization", true}}), "kvm"),
             Catch::Contains("no nested virtualization"));
}

TEST_CASE("KVM agents come before emulating ones, whatever their free memory",
          "[placement][shapes]") {
  const auto kvm = endpoint("kvm");
  const auto tcg = endpoint("tcg");
  auto roomy = shaped_capacity("qemu");
  roomy.free.memory_mib = 60000;
  const std::vector<PlacementInput> inputs = {{&tcg, roomy, ""},
                                              {&kvm, shaped_capacity("kvm"), ""}};
  for (const auto policy : {Placement::spread, Placement::pack}) {
    CHECK(names(plan_placement(small_debian(), inputs, policy), inputs) ==
          std::vector<std::string>{"kvm", "tcg"});
  }
  // A pool that asks for emulation takes the agents as they come.
  CHECK(names(plan_placement(shaped_request({{"virt_type", "qemu"}}), inputs, Placement::spread),
              inputs) == std::vector<std::string>{"tcg", "kvm"});
}

TEST_CASE("disks count against an agent's disk limit", "[placement][shapes]") {
  const auto a = endpoint("a");
  auto c = shaped_capacity("kvm");
  c.limit.disk_gib = 100;
  c.free.disk_gib = 45;
  const std::vector<PlacementInput> inputs = {{&a, c, ""}};
  CHECK(names(plan_placement(shaped_request({{"root_disk_gib", 40}}), inputs, Placement::spread),
              inputs) == std::vector<std::string>{"a"});
  const auto plan =
      plan_placement(shaped_request({{"root_disk_gib", 40},
                                     {"scratch_disks", {{{"pool", "nvme"}, {"size_gib", 10}}}}}),
                     inputs, Placement::spread);
  CHECK_THAT(reason_of(plan, "a"), Catch::Contains("disks of 50 GiB, free 45 GiB"));
}

TEST_CASE("the shape offer and disk amounts read back as they were written",
          "[placement][shapes]") {
  auto original = shaped_capacity("kvm", true);
  original.free.disk_gib = 12;
  const auto back = wire::parse_agent_capacity(wire::to_json(original).dump());
  CHECK(back.shapes == original.shapes);
  CHECK(back.free.disk_gib == 12);
}

namespace {

/// `capacity(free)` whose share for the asking controller leaves `room_instances` at normal
/// and low priority (`low_room`), holding `used` smalls.
wire::AgentCapacity shared_capacity(std::uint64_t free_memory_mib, std::uint64_t room_instances,
                                    std::uint64_t low_room, std::uint64_t used = 0) {
  auto c = capacity(free_memory_mib);
  wire::ControllerShare share;
  share.used = {.vcpus = 2 * used, .memory_mib = 2048 * used, .instances = used, .disk_gib = 0};
  share.instances_bounded = true;
  const auto room = [](std::uint64_t instances) {
    return wire::ResourceAmount{
        .vcpus = 2 * instances, .memory_mib = 2048 * instances, .instances = instances};
  };
  share.room = {{wire::Priority::low, room(low_room)},
                {wire::Priority::normal, room(room_instances)},
                {wire::Priority::high, room(room_instances + 1)}};
  c.share = share;
  return c;
}

}  // namespace

TEST_CASE("placement: an agent's share for the controller is its room, at the pool's priority",
          "[placement][shares]") {
  const auto a = endpoint("a");
  const auto b = endpoint("b");
  // a has the most free memory but none of it for this controller at normal priority.
  const std::vector<PlacementInput> inputs = {{&a, shared_capacity(30000, 0, 0), ""},
                                              {&b, shared_capacity(8192, 2, 0), ""}};
  auto request = small_debian();
  auto plan = plan_placement(request, inputs, Placement::spread);
  CHECK(names(plan, inputs) == std::vector<std::string>{"b"});
  CHECK_THAT(reason_of(plan, "a"),
             Catch::Contains("no room for this controller at priority normal"));
  request.priority = wire::Priority::low;
  plan = plan_placement(request, inputs, Placement::spread);
  CHECK(plan.order.empty());
  CHECK_THAT(reason_of(plan, "b"), Catch::Contains("priority low"));
  // High takes the headroom; and goes to the most room even when the policy packs.
  request.priority = wire::Priority::high;
  const auto c = endpoint("c");
  const std::vector<PlacementInput> three = {{&c, shared_capacity(8192, 3, 0), ""},
                                             {&a, shared_capacity(30000, 0, 0), ""},
                                             {&b, shared_capacity(30000, 9, 0), ""}};
  plan = plan_placement(request, three, Placement::pack);
  CHECK(names(plan, three) == std::vector<std::string>{"b", "c", "a"});
  request.priority = wire::Priority::normal;
  CHECK(names(plan_placement(request, three, Placement::pack), three) ==
        std::vector<std::string>{"c", "b"});
  // The operator's cap on the controller's priority is the agent's to apply, and the share says
  // it: a high pool of a controller capped at low gets low's room.
  auto capped = shared_capacity(30000, 3, 0);
  capped.share->max_priority = wire::Priority::low;
  const std::vector<PlacementInput> one = {{&a, capped, ""}};
  request.priority = wire::Priority::high;
  CHECK(plan_placement(request, one, Placement::spread).order.empty());
}

TEST_CASE("placement: a fleet quota counts the controller's use on every agent that answered",
          "[placement][shares]") {
  const auto a = endpoint("a");
  const auto b = endpoint("b");
  const auto c = endpoint("c");
  const FleetQuota quota{.controller = kController, .max_instances = 5, .max_vcpus = 0};
  std::vector<PlacementInput> inputs = {{&a, shared_capacity(30000, 9, 9, 2), ""},
                                        {&b, shared_capacity(30000, 9, 9, 2), ""},
                                        {&c, std::nullopt, "unreachable"}};
  CHECK_FALSE(over_fleet_quota(quota, small_debian(), inputs));
  inputs[2] = {&c, shared_capacity(30000, 9, 9, 1), ""};
  const auto over = over_fleet_quota(quota, small_debian(), inputs);
  REQUIRE(over);
  CHECK_THAT(*over, Catch::Contains("max_instances 5 (holds 5)") && Catch::Contains(kController));
  // vCPUs count the flavor's: 10 held + 2 > 11.
  const FleetQuota vcpus{.controller = kController, .max_instances = 0, .max_vcpus = 11};
  CHECK_THAT(over_fleet_quota(vcpus, small_debian(), inputs).value_or(""),
             Catch::Contains("max_vcpus 11 (holds 10)"));
  inputs[2] = {&c, std::nullopt, "unreachable"};
  CHECK_FALSE(over_fleet_quota(vcpus, small_debian(), inputs));
}
