// Saved warm guests on libvirt's test driver, whose save and restore write and read a real
// file: saved after ready, counted as disk and not memory, restored for garm's create, kept
// across a restart, and a damaged or missing memory file sends the create cold.

#include <fstream>
#include <future>

#include <catch2/catch.hpp>

#include "agent/instances/identifiers.hpp"
#include "agent/instances/warm_pool.hpp"
#include "support/fake_garm.hpp"
#include "support/guest_host.hpp"
#include "support/test_support.hpp"

using namespace garm_edge;
using namespace garm_edge::testing;

namespace {

/// guests.xml with its storage pool in `pool_dir`: the test driver writes saved states there.
std::string fixture_with_pool_in(const std::filesystem::path& pool_dir) {
  std::ifstream in(std::string(GARM_EDGE_TEST_DATA_DIR) + "/guests.xml");
  std::string xml((std::istreambuf_iterator<char>(in)), {});
  const std::string from = "<path>/edge-pool</path>";
  xml.replace(xml.find(from), from.size(), "<path>" + pool_dir.string() + "</path>");
  const auto path = pool_dir / "host.xml";
  std::ofstream(path) << xml;
  return "test://" + path.string();
}

/// One saved warm guest wanted for kController, none running.
std::function<void(agent::AgentConfig&)> one_saved(const std::filesystem::path& pool_dir) {
  return [pool_dir](agent::AgentConfig& config) {
    config.libvirt.uri = fixture_with_pool_in(pool_dir);
    config.warm = {{.controller = kController,
                    .image = "debian-12",
                    .flavor = "small",
                    .count = 0,
                    .saved = 1,
                    .ready_timeout = std::chrono::seconds(600),
                    .name = "debian-12/small for " + kController}};
  };
}

const std::string kToken = "eyJhbGciOiJIUzI1NiJ9.saved.signature";

}  // namespace

TEST_CASE("a saved warm guest holds disk, not memory, and garm's create restores and binds it",
          "[guests][integration][warm]") {
  TempDir pool_dir("saved-pool");
  FakeGarm garm(FakeGarmOptions{});
  GuestHost agent(garm, true, one_saved(pool_dir.path()));
  agent::WarmPool pool(*agent.service, agent.host.clock, agent.host.log);
  REQUIRE(pool.pass().started == 1);
  auto warm = agent.service->warm_guests().front();
  const auto memory_file = pool_dir.path() / agent::memory_volume_name_for(warm.domain_name);
  const auto& flavor = agent.host.config.flavors.front();
  const auto memory_before = agent.service->capacity().used.memory_mib;
  CHECK(pool.pass().saved == 0);  // warming: nothing to save yet
  REQUIRE(agent.service->mark_warm_ready(warm.domain_name));

  const auto pass = pool.pass();
  REQUIRE(pass.saved == 1);
  CHECK(pass.started == 0);  // the one saved guest is the entry's whole want
  warm = agent.service->warm_guests().front();
  CHECK(warm.warm->state == agent::WarmState::saved);
  CHECK_FALSE(warm.warm->saved_at.empty());
  CHECK(agent.host.hypervisor.find_by_uuid(warm.domain_uuid)->state ==
        hypervisor::PowerState::shutoff);
  CHECK(std::filesystem::exists(memory_file));
  const auto saved_report = agent.service->capacity();
  CHECK(saved_report.used.memory_mib == memory_before - flavor.memory_mib);
  CHECK(saved_report.used.instances == 1);  // still its slot, and its controller's
  CHECK(saved_report.usage.of(kController).disk_gib == flavor.disk_gib + flavor.memory_mib / 1024);
  CHECK(saved_report.warm.front().ready == 1);  // placement may send it a create
  CHECK(pool.pass().saved == 0);                // kept as it is
  CHECK_THAT(pool.render_metrics(), Catch::Contains("garm_edge_warm_guests{state=\"saved\"} 1"));

  SECTION("garm's create restores it: the same domain, running, its memory file gone") {
    const auto created =
        agent.service->create(kControllerId, agent.bootstrap("garm-saved-a", kToken));
    CHECK(created.provider_id == warm.domain_uuid);
    CHECK(created.status == wire::InstanceStatus::running);
    CHECK(agent.host.hypervisor.find_by_uuid(warm.domain_uuid)->state ==
          hypervisor::PowerState::running);
    CHECK_FALSE(agent.host.hypervisor.find_volume("edge-pool",
                                                  agent::memory_volume_name_for(warm.domain_name)));
    CHECK(agent.service->capacity().used.memory_mib == memory_before);
    const auto timeline =
        agent.service->startup_timeline(kControllerId, instance_ref("garm-saved-a"));
    REQUIRE(timeline);
    CHECK(timeline->labels.start() == "restored");
    REQUIRE(timeline->marks.size() == 2);
    CHECK(timeline->marks.at(1).first == agent::StartupPhase::restored);
    const auto metrics = pool.render_metrics();
    CHECK_THAT(metrics, Catch::Contains("garm_edge_warm_restore_seconds_count 1"));
    CHECK_THAT(metrics, Catch::Contains(
                            "garm_edge_warm_restore_fallbacks_total{reason=\"restore_failed\"} 0"));
    // The pool saves the next one once it is ready.
    CHECK(pool.pass().started == 1);
  }
  SECTION("a damaged memory file: the guest is removed and the create goes cold") {
    std::ofstream(memory_file, std::ios::trunc) << "not a saved domain";
    const auto created =
        agent.service->create(kControllerId, agent.bootstrap("garm-saved-a", kToken));
    CHECK(created.provider_id != warm.domain_uuid);
    CHECK(created.status == wire::InstanceStatus::running);
    CHECK_FALSE(agent.host.hypervisor.find_by_uuid(warm.domain_uuid));
    CHECK(agent.service->warm_guests().empty());
    CHECK(agent.service->warm_restores().fallbacks(agent::RestoreFallback::restore_failed) == 1);
    CHECK(agent.service->list(kControllerId, pool_id(kPool)).size() == 1);
  }
  SECTION("a memory file gone while it waits: the pool replaces the guest") {
    REQUIRE(agent.host.hypervisor.delete_volume("edge-pool",
                                                agent::memory_volume_name_for(warm.domain_name)));
    const auto replaced = pool.pass();
    CHECK(replaced.retired == 1);
    CHECK(replaced.started == 1);
    CHECK_FALSE(agent.host.hypervisor.find_by_uuid(warm.domain_uuid));
  }
  SECTION("after a restart it is still saved, kept, and restored for the create") {
    const auto restarted = agent.host.service(agent.hypervisor, agent.host.store);
    restarted->serve_guests(agent.attachments);
    agent::WarmPool restarted_pool(*restarted, agent.host.clock, agent.host.log);
    const auto after = restarted_pool.pass();
    CHECK(after.retired == 0);
    CHECK(after.started == 0);
    const auto created = restarted->create(kControllerId, agent.bootstrap("garm-saved-a", kToken));
    CHECK(created.provider_id == warm.domain_uuid);
  }
  SECTION("another controller's create never restores it") {
    const auto other =
        agent.service->create(kOtherControllerId, agent.bootstrap("garm-other", "token-other"));
    CHECK(other.provider_id != warm.domain_uuid);
    CHECK(agent.service->warm_guests().front().warm->state == agent::WarmState::saved);
  }
  SECTION("removing the entry retires it with its memory file") {
    agent.host.config.warm.clear();
    CHECK(pool.pass().retired == 1);
    CHECK_FALSE(agent.host.hypervisor.find_by_uuid(warm.domain_uuid));
    CHECK_FALSE(agent.host.hypervisor.find_volume("edge-pool",
                                                  agent::memory_volume_name_for(warm.domain_name)));
  }
}

TEST_CASE("a warm guest's poll, held through its save, gets its assignment when it is restored",
          "[guests][integration][warm]") {
  using namespace std::chrono_literals;
  TempDir pool_dir("saved-pool");
  FakeGarm garm(FakeGarmOptions{});
  GuestHost agent(garm, true, one_saved(pool_dir.path()));
  agent::WarmPool pool(*agent.service, agent.host.clock, agent.host.log);
  REQUIRE(pool.pass().started == 1);
  const auto warm = agent.service->warm_guests().front();
  REQUIRE(warm.guest);
  const auto bearer =
      "-H 'Authorization: Bearer " + warm_token_of(agent.host.store, warm.domain_name) + "'";
  REQUIRE(agent.service->mark_warm_ready(warm.domain_name));

  // As the guest asks: held for a second, and its answer is 204 while it is not bound.
  const auto url = agent.base_url() + "/warm/assignment?wait=1";
  CHECK(curl_from(warm.guest->ip, url, bearer).status == 204);
  auto poll =
      std::async(std::launch::async, [&] { return curl_from(warm.guest->ip, url, bearer); });
  while (agent.guests->assignment_polls() == 0) {
    std::this_thread::sleep_for(10ms);
  }
  REQUIRE(pool.pass().saved == 1);
  CHECK(poll.wait_for(2500ms) == std::future_status::timeout);  // past its wait: it sleeps

  const auto created =
      agent.service->create(kControllerId, agent.bootstrap("garm-saved-a", kToken));
  CHECK(created.provider_id == warm.domain_uuid);
  REQUIRE(poll.wait_for(10s) == std::future_status::ready);
  const auto answer = poll.get();
  CHECK(answer.status == 200);
  CHECK_THAT(answer.body, Catch::Contains("hostnamectl set-hostname 'garm-saved-a'"));
  CHECK(agent.guests->assignment_polls() == 0);
}

TEST_CASE("saved warm guests stay within [capacity] max_saved_gib", "[guests][integration][warm]") {
  TempDir pool_dir("saved-pool");
  FakeGarm garm(FakeGarmOptions{});
  GuestHost agent(garm, true, [&](agent::AgentConfig& config) {
    one_saved(pool_dir.path())(config);
    config.warm.front().saved = 3;
    config.capacity.max_saved_gib = 4;  // two of the 2 GiB flavor
  });
  agent::WarmPool pool(*agent.service, agent.host.clock, agent.host.log);
  std::size_t saved = 0;
  for (int round = 0; round < 6; ++round) {
    pool.pass();
    for (const auto& guest : agent.service->warm_guests()) {
      agent.service->mark_warm_ready(guest.domain_name);
    }
    saved += pool.pass().saved;
  }
  CHECK(saved == 2);
  CHECK(agent.service->warm_guests().size() == 2);
}
