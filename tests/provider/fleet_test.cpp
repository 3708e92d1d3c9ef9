// One garm provider entry over a fleet of agents, each on its own test driver, with
// garm-provider-edge run exactly as garm runs it: placement (spread, pack, arch, labels,
// capacity), idempotent retries across agents, agents that die or never answer, and the fleet
// view.
#include <algorithm>
#include <chrono>
#include <fstream>
#include <future>
#include <map>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "support/api_server.hpp"
#include "support/black_hole.hpp"
#include "wire/json_fields.hpp"
#include "wire/provider_instance.hpp"

using namespace garm_edge;
using namespace garm_edge::testing;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

/// A loopback port nothing listens on: an agent whose host is down refuses at once.
std::uint16_t closed_port() {
  const BlackHole listener;
  return listener.port();  // closed as it goes
}

/// An agent as the provider config names it: a live ApiServer, one whose host is down (the
/// server's PKI on a closed port), or a black hole.
struct FleetMember {
  std::string name;
  ApiServer* server = nullptr;
  const BlackHole* hole = nullptr;
  bool down = false;
  unsigned weight = 100;
  std::vector<std::string> labels = {};
};

/// Generous, so a loaded machine does not fail a test, unless a black hole is in the fleet:
/// then a probe has 1 s and a request 8 s, so a create that waited on the hole for more than
/// its probe deadline shows.
std::string timeouts_for(const std::vector<FleetMember>& members) {
  const bool hole = std::any_of(members.begin(), members.end(),
                                [](const FleetMember& member) { return member.hole != nullptr; });
  return hole ? "[timeouts]\nprobe_seconds = 1\nrequest_seconds = 8\ncreate_seconds = 30\n"
              : "[timeouts]\nprobe_seconds = 5\nrequest_seconds = 20\ncreate_seconds = 30\n";
}

/// garm-provider-edge configured for a fleet, run as garm runs it.
class FleetGarm {
 public:
  /// `session_dir`: its own when empty; "none" for none.
  /// `extra`: further top-level config (e.g. [[quotas]]).
  FleetGarm(const std::vector<FleetMember>& members, const std::string& placement = "spread",
            std::filesystem::path session_dir = {}, const std::string& extra = "") {
    std::ofstream config(config_ = dir_.path() / "provider.toml");
    if (session_dir.empty()) {
      session_dir = dir_.path() / "sessions";
    }
    config << "placement = \"" << placement << "\"\n"
           << (session_dir == "none" ? "" : "session_dir = \"" + session_dir.string() + "\"\n")
           << timeouts_for(members);
    for (const auto& member : members) {
      // A black hole has no PKI of its own: any member's will do, it never gets that far.
      const auto& pki = (member.server ? member.server : members.front().server)->pki();
      const auto port = member.down     ? closed_port()
                        : member.server ? member.server->port()
                                        : member.hole->port();
      config << "[[agents]]\nname = \"" << member.name << "\"\nurl = \"https://localhost:" << port
             << "\"\nca = \"" << (pki / "ca.crt").string() << "\"\n"
             << "certificate = \"" << (pki / "clients/garm.crt").string() << "\"\n"
             << "key = \"" << (pki / "clients/garm.key").string() << "\"\n"
             << "weight = " << member.weight << "\nlabels = [";
      for (std::size_t i = 0; i < member.labels.size(); ++i) {
        config << (i ? ", " : "") << "\"" << member.labels[i] << "\"";
      }
      config << "]\n";
    }
    config << extra;
  }

  ProcessResult run(const std::string& command, std::map<std::string, std::string> extra = {},
                    const std::string& input = "") const {
    extra["GARM_COMMAND"] = command;
    extra["GARM_CONTROLLER_ID"] = kController;
    extra["GARM_PROVIDER_CONFIG_FILE"] = config_.string();
    extra["GARM_INTERFACE_VERSION"] = "v0.1.0";
    return run_like_garm(kProvider, extra, input);
  }

  ProcessResult create(const std::string& name, const std::string& arch = "amd64",
                       const json& extra_specs = json::object()) const {
    auto bootstrap = bootstrap_for(name);
    bootstrap.arch = wire::parse_enum<wire::OsArch>(arch);
    bootstrap.extra_specs = extra_specs;
    return run("CreateInstance", {{"GARM_POOL_ID", kPool}},
               wire::to_go_json_text(wire::to_json(bootstrap)));
  }

  ProcessResult list() const { return run("ListInstances", {{"GARM_POOL_ID", kPool}}); }

  /// An operator's command: `garm-provider-edge <arguments...> --config <this config>`.
  ProcessResult operator_command(std::vector<std::string> arguments) const {
    arguments.insert(arguments.end(), {"--config", config_.string()});
    return run_program(kProvider, arguments);
  }

  ProcessResult status(const std::string& extra = "") const {
    std::vector<std::string> args = {"status", "--config", config_.string()};
    if (!extra.empty()) {
      args.push_back(extra);
    }
    return run_program(kProvider, args);
  }

 private:
  TempDir dir_;
  std::filesystem::path config_;
};

/// The agent a successful create or get put the instance on (its provider ID's prefix).
std::string agent_of(const ProcessResult& result) {
  INFO("exit " << result.exit_code << ", stderr: " << result.err);
  REQUIRE(result.exit_code == 0);
  const auto id = json::parse(result.out).at("provider_id").get<std::string>();
  return id.substr(0, id.rfind(':'));
}

/// An amd64 agent whose host keeps all but `free_mib` of its 32 GiB for itself.
ApiServer amd64_agent(std::uint64_t free_mib, std::size_t max_instances = 0) {
  return ApiServer("api.xml", [=](agent::AgentConfig& config) {
    config.images.resize(1);  // debian-12, amd64
    config.capacity = {.cpu_overcommit = 100,
                       .memory_overcommit = 1.0,
                       .reserved_memory_mib = 32768 - free_mib,
                       .max_instances = max_instances};
  });
}

/// An amd64 agent with room for every test's instances in memory, but guest addresses only in
/// `addresses` (each resting an hour once given back).
ApiServer amd64_agent_with_addresses(const std::string& addresses) {
  return ApiServer("api.xml", [=](agent::AgentConfig& config) {
    config.images.resize(1);  // debian-12, amd64
    enable_guest_addresses(config, addresses);
  });
}

/// An arm64 host offering debian-12 built for arm64 only.
ApiServer arm64_agent() {
  return ApiServer("fleet-arm.xml", [](agent::AgentConfig& config) {
    config.images = {debian_image("debian-12", "debian-12.qcow2")};
    config.images.front().arch = wire::OsArch::arm64;
    config.capacity = {.cpu_overcommit = 100,
                       .memory_overcommit = 1.0,
                       .reserved_memory_mib = 0,
                       .max_instances = 0};
  });
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

TEST_CASE(
    "fleet: spread follows free memory, arch picks the arm64 host, retries find the "
    "instance wherever it is",
    "[fleet]") {
  auto big = amd64_agent(12288);
  auto small = amd64_agent(8192);
  auto other = amd64_agent(4096);
  auto arm = arm64_agent();
  const FleetGarm garm({{.name = "big", .server = &big},
                        {.name = "small", .server = &small},
                        {.name = "other", .server = &other},
                        {.name = "arm", .server = &arm}});
  // 12288, 8192, 4096 MiB free; each instance takes 2048. Spread takes the most free each time;
  // agents within one instance's memory of each other are tied, and the instance's name picks
  // among them. Either way `big` takes 4, `small` 2 and `other` none, ending at 4096 each.
  std::map<std::string, int> placed;
  for (int i = 0; i < 6; ++i) {
    ++placed[agent_of(garm.create("garm-spread0" + std::to_string(i)))];
  }
  CHECK(placed == std::map<std::string, int>{{"big", 4}, {"small", 2}});
  // ...and an arm64 runner only ever lands on the arm64 host, with the most free memory or not.
  CHECK(agent_of(garm.create("garm-arm01", "arm64")) == "arm");

  // garm retries a create with the same name: the instance where it is is the answer, whatever
  // placement would choose now (all three amd64 agents are tied at 4096 MiB free).
  for (int i = 0; i < 6; ++i) {
    const auto name = "garm-spread0" + std::to_string(i);
    const auto first = json::parse(garm.run("GetInstance", {{"GARM_INSTANCE_ID", name}}).out);
    const auto retry = garm.create(name);
    REQUIRE(retry.exit_code == 0);
    CHECK(json::parse(retry.out).at("provider_id") == first.at("provider_id"));
  }

  const auto list = garm.list();
  REQUIRE(list.exit_code == 0);
  CHECK(json::parse(list.out).size() == 7);
}

TEST_CASE(
    "fleet: pack fills the heaviest host first, capacity refusals fall through to the "
    "next, and labels pick hosts",
    "[fleet]") {
  auto first = amd64_agent(32768, 3);
  auto second = amd64_agent(32768);
  auto gpu = amd64_agent(4096);
  const FleetGarm garm({{.name = "first", .server = &first, .weight = 500},
                        {.name = "second", .server = &second},
                        {.name = "gpu", .server = &gpu, .weight = 10, .labels = {"gpu"}}},
                       "pack");
  // A burst of creates at once: probes all see `first` free, first takes 3 and refuses the
  // rest with no_capacity, which the provider takes as "try the next agent".
  std::vector<std::future<ProcessResult>> burst;
  for (int i = 0; i < 8; ++i) {
    burst.push_back(std::async(std::launch::async,
                               [&, i] { return garm.create("garm-pack0" + std::to_string(i)); }));
  }
  std::map<std::string, int> per_agent;
  for (auto& create : burst) {
    ++per_agent[agent_of(create.get())];
  }
  CHECK(per_agent["first"] == 3);
  CHECK(per_agent["second"] == 5);
  CHECK(per_agent.count("gpu") == 0);

  CHECK(agent_of(garm.create("garm-gpu01", "amd64", {{"agent_labels", {"gpu"}}})) == "gpu");
  CHECK(agent_of(garm.create("garm-gpu02", "amd64", {{"agent_labels", {"gpu"}}})) == "gpu");
  // The only host with the label is full: a loud failure naming why each agent was skipped.
  const auto full = garm.create("garm-gpu03", "amd64", {{"agent_labels", {"gpu"}}});
  CHECK(full.exit_code == 1);
  CHECK(full.out.empty());
  CHECK_THAT(full.err,
             Catch::Contains("no agent can take instance garm-gpu03") &&
                 Catch::Contains("first: no label \"gpu\"") &&
                 Catch::Contains("gpu: no capacity: flavor small needs 2 vCPUs, 2048 MiB"));
}

TEST_CASE(
    "fleet: a dead agent and a black-holed one do not hold creates, and make lists and "
    "lookups fail loudly",
    "[fleet]") {
  auto alive = amd64_agent(32768);
  auto doomed = amd64_agent(32768);
  auto arm = arm64_agent();
  const BlackHole hole;
  const std::vector<FleetMember> live = {{.name = "alive", .server = &alive},
                                         {.name = "doomed", .server = &doomed, .weight = 1000},
                                         {.name = "arm", .server = &arm}};
  auto with_hole = live;
  with_hole.push_back({.name = "hole", .hole = &hole});
  // The hole costs every command its deadline: only the steps about it see it.
  const FleetGarm garm(live, "pack");
  const FleetGarm garm_and_hole(with_hole, "pack");
  CHECK(agent_of(garm.create("garm-dead01")) == "doomed");
  const auto doomed_id =
      json::parse(garm.run("GetInstance", {{"GARM_INSTANCE_ID", "garm-dead01"}}).out)
          .at("provider_id")
          .get<std::string>();

  doomed.stop();
  const auto started = Clock::now();
  const auto create = garm_and_hole.create("garm-dead02");
  const auto create_seconds = seconds_since(started);
  CHECK(agent_of(create) == "alive");
  CHECK(create_seconds < 5.0);  // the 1 s probe deadline, not the hole's 8 s request timeout
  UNSCOPED_INFO("create beside a dead and a black-holed agent took " << create_seconds << " s");

  // garm must never get a partial list: it would take the dead host's runners for gone ones.
  const auto list = garm_and_hole.list();
  CHECK(list.exit_code == 1);
  CHECK(list.out.empty());
  CHECK_THAT(list.err, Catch::Contains("ListInstances: not every agent answered") &&
                           Catch::Contains("agent doomed") && Catch::Contains("agent hole") &&
                           !Catch::Contains("agent alive"));
  // An instance on a dead host is not gone: not exit code 30, by provider ID or by name.
  CHECK(garm.run("GetInstance", {{"GARM_INSTANCE_ID", doomed_id}}).exit_code == 1);
  CHECK(garm.run("GetInstance", {{"GARM_INSTANCE_ID", "garm-dead01"}}).exit_code == 1);
  CHECK(garm.run("StopInstance", {{"GARM_INSTANCE_ID", "garm-dead01"}}).exit_code == 1);
  // An instance on a live host is found by name while others are down.
  CHECK(agent_of(garm.run("GetInstance", {{"GARM_INSTANCE_ID", "garm-dead02"}})) == "alive");
  CHECK(garm.run("StopInstance", {{"GARM_INSTANCE_ID", "garm-dead02"}}).exit_code == 0);
  const auto removed = garm.run("RemoveAllInstances");
  CHECK(removed.exit_code == 1);
  CHECK_THAT(removed.err, Catch::Contains("agent doomed") && !Catch::Contains("agent alive"));

  // Only the arm64 host takes an arm64 runner; once it drains, nobody can: one line per
  // agent, each with its reason.
  CHECK(agent_of(garm.create("garm-dead03", "arm64")) == "arm");
  arm.service().set_draining(true);
  const auto refused = garm_and_hole.create("garm-dead04", "arm64");
  CHECK(refused.exit_code == 1);
  CHECK_THAT(refused.err, Catch::Contains("alive: image \"debian-12\" is amd64, not arm64") &&
                              Catch::Contains("doomed: unreachable") &&
                              Catch::Contains("arm: draining") &&
                              Catch::Contains("hole: unreachable"));
}

TEST_CASE(
    "fleet: an agent out of guest addresses is passed over, whether the probe or the create "
    "finds it out",
    "[fleet][guests]") {
  auto first = amd64_agent_with_addresses("192.168.150.10-192.168.150.11");
  auto second = amd64_agent(32768);
  auto arm = arm64_agent();
  const FleetGarm garm(
      {{.name = "first", .server = &first, .weight = 500}, {.name = "second", .server = &second}},
      "pack");
  // A burst at once: every probe may see `first` with both addresses free; it takes two and
  // refuses the rest with no_capacity, which sends them on to `second`.
  std::vector<std::string> names;
  std::vector<std::future<ProcessResult>> burst;
  for (int i = 0; i < 6; ++i) {
    names.push_back("garm-addr0" + std::to_string(i));
    burst.push_back(
        std::async(std::launch::async, [&garm, name = names.back()] { return garm.create(name); }));
  }
  std::vector<std::string> on_first;
  for (std::size_t i = 0; i < burst.size(); ++i) {
    if (agent_of(burst[i].get()) == "first") {
      on_first.push_back(names[i]);
    }
  }
  REQUIRE(on_first.size() == 2);

  // A deleted guest's address rests: the probe shows `first` without a free address, and the
  // create goes to `second` with no refusal on the way.
  REQUIRE(garm.run("DeleteInstance", {{"GARM_INSTANCE_ID", on_first.front()}}).exit_code == 0);
  CHECK(agent_of(garm.create("garm-addr10")) == "second");
  const auto lines = first.host().log.lines();
  CHECK(std::none_of(lines.begin(), lines.end(), [](const std::string& line) {
    return line.find("garm-addr10") != std::string::npos;
  }));
  const auto status = garm.status("--json");
  REQUIRE(status.exit_code == 0);
  CHECK(json::parse(status.out).at(0).at("capacity").at("addresses") ==
        json{{"total", 2}, {"held", 1}, {"resting", 1}, {"free", 0}});

  // With nobody else to take it, the skipped agent says why.
  const FleetGarm first_and_arm(
      {{.name = "first", .server = &first}, {.name = "arm", .server = &arm}});
  const auto refused = first_and_arm.create("garm-addr11");
  CHECK(refused.exit_code == 1);
  CHECK_THAT(
      refused.err,
      Catch::Contains("first: no free guest address: 1 held, 1 resting after a delete, of 2") &&
          Catch::Contains("arm: image \"debian-12\" is arm64, not amd64"));
}

TEST_CASE("fleet: the status view shows every agent, and --json is for scripts", "[fleet]") {
  auto alive = amd64_agent(8192);
  auto arm = arm64_agent();
  const BlackHole hole;
  const FleetGarm garm({{.name = "alive", .server = &alive},
                        {.name = "arm", .server = &arm},
                        {.name = "hole", .hole = &hole}});
  REQUIRE(alive.service().create(kControllerId, bootstrap_for("garm-view01")).name ==
          "garm-view01");

  const auto text = garm.status();
  INFO(text.out << text.err);
  CHECK(text.exit_code == 1);  // one agent did not answer
  CHECK_THAT(text.out, Catch::Contains("AGENT") && Catch::Contains("alive") &&
                           Catch::Contains("6144/8192") && Catch::Contains("running=1") &&
                           Catch::Contains("aarch64") && Catch::Contains("debian-12/arm64"));
  CHECK_THAT(text.out, Catch::Matches("(.|\n)*hole +direct +error +agent hole(.|\n)*"));

  const auto report = json::parse(garm.status("--json").out);
  REQUIRE(report.size() == 3);
  CHECK(report[0].at("reachable") == true);
  CHECK(report[0].at("capacity").at("free").at("memory_mib") == 6144);
  CHECK(report[1].at("capacity").at("machine") == "aarch64");
  CHECK(report[2].at("reachable") == false);
  CHECK(report[2].at("error").get<std::string>().find("hole") != std::string::npos);

  CHECK(run_program(kProvider, {"status"}).exit_code == 2);
}

TEST_CASE(
    "fleet: a delete that an unreachable agent cannot carry out is kept, shown, and carried "
    "out by the next call that reaches it",
    "[fleet]") {
  auto first = amd64_agent(32768);
  auto second = amd64_agent(32768);
  const TempDir sessions;
  // The same provider entry twice, sharing its session_dir: with `second` reachable, and with
  // `second`'s host down.
  const FleetGarm reachable(
      {{.name = "first", .server = &first}, {.name = "second", .server = &second, .weight = 1000}},
      "pack", sessions.path());
  const FleetGarm second_down(
      {{.name = "first", .server = &first}, {.name = "second", .server = &second, .down = true}},
      "pack", sessions.path());
  CHECK(agent_of(reachable.create("garm-kept01")) == "second");
  const auto by_id = json::parse(reachable.create("garm-kept02").out).at("provider_id");
  CHECK(agent_of(reachable.create("garm-kept03")) == "second");

  // garm deletes by name after a failed create, and by provider ID on scale down: with the
  // holder unreachable both exit 0, so garm moves on, and neither is forgotten.
  const auto by_name = second_down.run("DeleteInstance", {{"GARM_INSTANCE_ID", "garm-kept01"}});
  INFO(by_name.err);
  CHECK(by_name.exit_code == 0);
  CHECK(second_down.run("DeleteInstance", {{"GARM_INSTANCE_ID", by_id.get<std::string>()}})
            .exit_code == 0);
  CHECK(second.service().list(kControllerId, pool_id(kPool)).size() == 3);  // nothing reached it

  const auto status = second_down.status();
  CHECK_THAT(status.out, Catch::Contains("2 deferred delete(s)") &&
                             Catch::Contains("garm-kept01") && Catch::Contains(kController) &&
                             Catch::Contains("Connection refused"));
  const auto report = json::parse(second_down.status("--json").out);
  CHECK(report.at(1).at("deferred_deletes").size() == 2);
  CHECK(report.at(0).at("deferred_deletes").empty());

  // Still down: a list fails (not partial); the entries stay.
  CHECK(second_down.list().exit_code == 1);
  CHECK(json::parse(second_down.status("--json").out).at(1).at("deferred_deletes").size() == 2);

  // Back: the list garm gets leaves out what it deleted, and the same call deletes them.
  const auto list = reachable.list();
  REQUIRE(list.exit_code == 0);
  const auto listed = json::parse(list.out);
  REQUIRE(listed.size() == 1);
  CHECK(listed.at(0).at("name") == "garm-kept03");
  const auto left = second.service().list(kControllerId, pool_id(kPool));
  REQUIRE(left.size() == 1);
  CHECK(left.front().name == "garm-kept03");
  CHECK(json::parse(reachable.status("--json").out).at(1).at("deferred_deletes").empty());
  CHECK(reachable.status().out.find("deferred") == std::string::npos);
}

TEST_CASE(
    "fleet: without a session_dir a delete on an unreachable agent fails and says how to keep it",
    "[fleet]") {
  auto first = amd64_agent(32768);
  auto second = amd64_agent(32768);
  const FleetGarm garm(
      {{.name = "first", .server = &first}, {.name = "second", .server = &second, .down = true}},
      "pack", "none");
  const auto deleted = garm.run("DeleteInstance", {{"GARM_INSTANCE_ID", "garm-nowhere01"}});
  CHECK(deleted.exit_code == 1);
  CHECK_THAT(deleted.err, Catch::Contains("agent second") && Catch::Contains("session_dir"));
}

TEST_CASE("fleet: garm's retry of a failed create under the same name voids the delete kept for it",
          "[fleet]") {
  auto only = amd64_agent(32768);
  const TempDir sessions;
  const FleetGarm reachable({{.name = "only", .server = &only}}, "pack", sessions.path());
  const FleetGarm down({{.name = "only", .server = &only, .down = true}}, "pack", sessions.path());
  // The create failed while the host was down; garm's delete by name is kept for it.
  CHECK(down.create("garm-again01").exit_code == 1);
  CHECK(down.run("DeleteInstance", {{"GARM_INSTANCE_ID", "garm-again01"}}).exit_code == 0);
  CHECK(json::parse(down.status("--json").out).at(0).at("deferred_deletes").size() == 1);

  // Back: garm creates the instance again under the same name. The kept delete is void; the
  // calls after the create must not delete what garm now runs.
  CHECK(agent_of(reachable.create("garm-again01")) == "only");
  CHECK(json::parse(reachable.status("--json").out).at(0).at("deferred_deletes").empty());
  const auto list = reachable.list();
  REQUIRE(list.exit_code == 0);
  CHECK(json::parse(list.out).size() == 1);
  CHECK(only.service().list(kControllerId, pool_id(kPool)).size() == 1);
}

TEST_CASE(
    "fleet: garm's retry of a create whose first attempt did land gets a new instance, not the "
    "stale one the kept delete was for",
    "[fleet]") {
  auto only = amd64_agent(32768);
  const TempDir sessions;
  const FleetGarm reachable({{.name = "only", .server = &only}}, "pack", sessions.path());
  const FleetGarm down({{.name = "only", .server = &only, .down = true}}, "pack", sessions.path());
  // The first attempt landed on the agent, but garm took the create as failed (its answer was
  // lost) and deleted the name while the host could not be reached.
  const auto first = json::parse(reachable.create("garm-stale01").out).at("provider_id");
  CHECK(down.run("DeleteInstance", {{"GARM_INSTANCE_ID", "garm-stale01"}}).exit_code == 0);

  // garm's retry under the same name: the stale instance is deleted first, a new one made.
  const auto retried = reachable.create("garm-stale01");
  REQUIRE(retried.exit_code == 0);
  CHECK(json::parse(retried.out).at("provider_id") != first);
  CHECK(only.service().list(kControllerId, pool_id(kPool)).size() == 1);
  CHECK(json::parse(reachable.status("--json").out).at(0).at("deferred_deletes").empty());

  // With the host still down, the retry does not go there while the kept delete waits.
  CHECK(down.run("DeleteInstance", {{"GARM_INSTANCE_ID", "garm-stale01"}}).exit_code == 0);
  const auto refused = down.create("garm-stale01");
  CHECK(refused.exit_code == 1);
  CHECK_THAT(refused.err, Catch::Contains("may still hold the failed garm-stale01"));
}

TEST_CASE("one command makes every agent with the image pull it ahead of demand",
          "[fleet][images]") {
  const auto everything = [](agent::AgentConfig& config) {
    config.images.resize(1);
    config.api.clients = {{.identity = "garm", .controllers = {"*"}}};
  };
  ApiServer pulling("api.xml", everything);
  FakeImageBases images;
  pulling.service().use_image_bases(images);
  ApiServer without("api.xml", everything);  // no image with a source
  ApiServer garm_only = amd64_agent(8192);   // garm's client is allowed its controller only
  const FleetGarm fleet(
      {{.name = "pulling", .server = &pulling}, {.name = "without", .server = &without}});
  const auto pulled = fleet.operator_command({"images", "pull", "debian-12"});
  INFO(pulled.out << pulled.err);
  CHECK(pulled.exit_code == 0);
  CHECK_THAT(pulled.out,
             Catch::Contains("pulling: pull started") &&
                 Catch::Contains("without: skipped: image \"debian-12\" has no source"));
  CHECK(images.pulls_asked == 1);
  CHECK_THAT(fleet.operator_command({"images", "pull", "debian-12"}).out,
             Catch::Contains("pulling: pull under way already"));

  const FleetGarm refused({{.name = "garm-only", .server = &garm_only}});
  const auto forbidden = refused.operator_command({"images", "pull", "debian-12"});
  CHECK(forbidden.exit_code == 1);
  CHECK_THAT(forbidden.out, Catch::Contains("garm-only: error: HTTP 403"));
  CHECK(refused.operator_command({"images", "pull", "../x"}).exit_code == 2);
}

TEST_CASE("fleet: a fleet quota holds across agents, and an agent's reservation steers placement",
          "[fleet][shares]") {
  auto a = amd64_agent(32768);
  auto b = amd64_agent(32768);
  // c keeps its 4 slots for another controller: garm's creates never go there.
  auto c = ApiServer("api.xml", [](agent::AgentConfig& config) {
    config.images.resize(1);
    config.capacity = {.cpu_overcommit = 100,
                       .memory_overcommit = 1.0,
                       .reserved_memory_mib = 0,
                       .max_instances = 4};
    config.shares.quotas.push_back(
        {.controller = kOtherController, .max = {}, .reserved = {.instances = 4}});
  });
  const FleetGarm garm({{.name = "a", .server = &a},
                        {.name = "b", .server = &b},
                        {.name = "c", .server = &c, .weight = 1000}},
                       "pack", {},
                       "[[quotas]]\ncontroller = \"" + kController + "\"\nmax_instances = 4\n");
  std::map<std::string, int> placed;
  for (int i = 0; i < 4; ++i) {
    ++placed[agent_of(garm.create("garm-fq0" + std::to_string(i)))];
  }
  CHECK(placed.count("c") == 0);
  // The fifth is refused by the provider, with nothing made anywhere.
  const auto over = garm.create("garm-fq04");
  CHECK(over.exit_code == 1);
  CHECK_THAT(over.err,
             Catch::Contains("fleet quota") && Catch::Contains("max_instances 4 (holds 4)"));
  CHECK(json::parse(garm.list().out).size() == 4);
  // The status view sums the controller's use over the fleet beside its quota.
  const auto status = garm.status();
  CHECK_THAT(status.out, Catch::Contains("FLEET QUOTA") && Catch::Contains(kController) &&
                             Catch::Contains("max_instances 4"));
  // A delete gives the fleet its room back.
  REQUIRE(garm.run("DeleteInstance", {{"GARM_INSTANCE_ID", "garm-fq00"}}).exit_code == 0);
  CHECK(agent_of(garm.create("garm-fq04")) != "c");
}
