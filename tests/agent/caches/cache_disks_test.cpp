// Caches on real libvirt code (the test driver): each guest of the cache's controller gets an
// overlay of the current generation as a disk its seed mounts; nobody else gets it; builders
// make generations and are never garm's.
#include <fstream>
#include <future>
#include <thread>

#include <catch2/catch.hpp>

#include "agent/caches/cache_refresher.hpp"
#include "agent/caches/cache_store.hpp"
#include "agent/instances/identifiers.hpp"
#include "support/file_disk_tools.hpp"
#include "support/service_error_matcher.hpp"
#include "support/test_support.hpp"
#include "wire/base64.hpp"

using namespace garm_edge;
using namespace garm_edge::testing;

namespace {

const std::string kGeneration = FakeCacheGenerations::kDockerGeneration;

void with_caches(agent::AgentConfig& config, const std::filesystem::path& scratch) {
  enable_guest_addresses(config, "192.168.150.10-192.168.150.40");
  config.guests.address = "127.0.0.1";
  config.caches_dir = scratch / "caches";
  std::ofstream(scratch / "refresh.sh") << "#!/bin/sh\ndocker pull debian:12\n";
  agent::CacheConfig docker;
  docker.name = "docker";
  docker.size_gib = 40;
  docker.mount = "/var/lib/docker";
  docker.controller = kController;
  docker.images = {"debian-12"};
  docker.refresh = {.script = scratch / "refresh.sh",
                    .image = "debian-12",
                    .flavor = "small",
                    .every = std::chrono::hours(24),
                    .timeout = std::chrono::hours(1)};
  auto tools = docker;
  tools.name = "tools";
  tools.mount = "/opt/hostedtoolcache";
  tools.images.clear();  // only for pools that ask for it
  config.caches = {docker, tools};
}

struct CacheHost {
  CacheHost()
      : host("reconcile.xml",
             [this](agent::AgentConfig& config) { with_caches(config, scratch.path()); }),
        guests(host.config, host.hypervisor, host.log),
        service(host.service()) {
    guests.serve(*service);
    service->use_cache_generations(generations);
  }
  TempDir scratch;
  Host host;
  ServedGuests guests;
  std::unique_ptr<agent::InstanceService> service;
  FakeCacheGenerations generations;
};

wire::BootstrapInstance asking_for(const std::string& name, const nlohmann::json& caches) {
  auto bootstrap = bootstrap_for(name);
  bootstrap.extra_specs = nlohmann::json{{"caches", caches}};
  return bootstrap;
}

}  // namespace

TEST_CASE("a guest gets its controller's cache on the current generation, mounted by its seed",
          "[caches]") {
  CacheHost cache;
  auto& host = cache.host;
  const auto created = cache.service->create(kControllerId, bootstrap_for("garm-cache01"));
  const auto domain_name = agent::domain_name_for(kController, "garm-cache01");
  const auto record = host.store.get(domain_name);
  REQUIRE(record);
  REQUIRE(record->caches.size() == 1);
  const auto& disk = record->caches.at(0);
  CHECK(disk.cache == "docker");
  CHECK(disk.generation == 3);
  CHECK(disk.generation_path == kGeneration);
  CHECK(disk.serial == "garm-cache-0");
  CHECK(disk.volume_name == agent::cache_volume_name_for(domain_name, "docker"));
  CHECK(host.hypervisor.disk_paths(created.provider_id) ==
        std::vector<std::string>{"/edge-pool/" + agent::volume_name_for(domain_name),
                                 "/edge-pool/" + disk.volume_name});
  CHECK_THAT(record->guest->user_data, Catch::Contains("/dev/disk/by-id/virtio-garm-cache-0") &&
                                           Catch::Contains("/var/lib/docker"));
  CHECK(cache.service->generation_in_use(kGeneration));

  cache.service->remove(kControllerId, instance_ref("garm-cache01"));
  CHECK(host.holds_nothing_of(kController, "garm-cache01"));
  CHECK_FALSE(host.hypervisor.find_volume("edge-pool", disk.volume_name));
  CHECK_FALSE(cache.service->generation_in_use(kGeneration));
}

TEST_CASE("a pool asks for a cache by name, and another controller's pool can neither get nor ask",
          "[caches]") {
  CacheHost cache;
  auto& host = cache.host;
  cache.service->create(kControllerId, asking_for("garm-cache02", {"tools"}));
  const auto record = host.store.get(agent::domain_name_for(kController, "garm-cache02"));
  REQUIRE(record->caches.size() == 2);
  CHECK(record->caches.at(1).cache == "tools");
  CHECK(record->caches.at(1).serial == "garm-cache-1");
  CHECK_THAT(record->guest->user_data, Catch::Contains("/opt/hostedtoolcache"));

  cache.service->create(kOtherControllerId, bootstrap_for("garm-cache03"));
  CHECK(host.store.get(agent::domain_name_for(kOtherController, "garm-cache03"))->caches.empty());

  for (const auto& asked : {nlohmann::json{"docker"}, nlohmann::json{"no-such"},
                            nlohmann::json{"../../etc"}, nlohmann::json("docker")}) {
    CHECK_THROWS_MATCHES(
        cache.service->create(kOtherControllerId, asking_for("garm-cache04", asked)),
        agent::ServiceError, has_code(agent::ServiceError::Code::invalid_argument));
    CHECK(host.holds_nothing_of(kOtherController, "garm-cache04"));
  }
  CHECK_THROWS_WITH(
      cache.service->create(kOtherControllerId, asking_for("garm-cache04", {"docker"})),
      Catch::Contains("has no cache \"docker\" for this controller"));
}

TEST_CASE("a cache with no generation yet: the guest starts without it", "[caches]") {
  CacheHost cache;
  cache.generations.tools_ready = false;
  cache.service->create(kControllerId, asking_for("garm-cache05", {"tools"}));
  const auto record = cache.host.store.get(agent::domain_name_for(kController, "garm-cache05"));
  REQUIRE(record->caches.size() == 1);
  CHECK(record->caches.at(0).cache == "docker");
}

TEST_CASE("reconcile keeps a live guest's cache overlay and removes one whose guest is gone",
          "[caches]") {
  CacheHost cache;
  auto& host = cache.host;
  cache.service->create(kControllerId, bootstrap_for("garm-cache06"));
  const auto live =
      agent::cache_volume_name_for(agent::domain_name_for(kController, "garm-cache06"), "docker");
  const auto orphan =
      agent::cache_volume_name_for(agent::domain_name_for(kController, "garm-gone01"), "docker");
  host.hypervisor.create_overlay({.pool = "edge-pool",
                                  .name = orphan,
                                  .capacity_bytes = 1U << 30U,
                                  .backing_path = kGeneration,
                                  .backing_format = "qcow2"});
  cache.service->reconcile();
  CHECK(host.hypervisor.find_volume("edge-pool", live));
  CHECK_FALSE(host.hypervisor.find_volume("edge-pool", orphan));
}

namespace {

/// A refresher over the test driver: its builders never boot, so the test plays the guest by
/// writing the status disk and powering the builder off.
struct RefreshHost {
  RefreshHost()
      : store(cache.host.config, tools, cache.host.clock, cache.host.log),
        refresher(
            cache.host.config, store, *cache.service, cache.host.clock, cache.host.log,
            {.poll = std::chrono::milliseconds(20), .retry_after_failure = std::chrono::hours(1)}) {
  }

  std::filesystem::path scratch_caches() const { return cache.scratch.path() / "caches"; }

  /// The builder's record, once it exists.
  agent::InstanceRecord builder() {
    for (int i = 0; i < 500; ++i) {
      for (const auto& record : cache.host.store.list()) {
        if (record.controller_id == agent::kCacheBuilderControllerId &&
            record.intent == agent::Intent::created) {
          return record;
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    FAIL("no builder was created");
    return {};
  }

  /// Plays the builder: writes `status` to its status disk and powers it off.
  void finish(const agent::InstanceRecord& builder, const std::string& status) {
    const auto disks = cache.host.hypervisor.disk_paths(builder.domain_uuid);
    REQUIRE(disks.size() == 3);
    std::ofstream(disks.at(2), std::ios::binary | std::ios::in | std::ios::out) << status;
    cache.host.hypervisor.destroy(builder.domain_uuid);
  }

  CacheHost cache;
  FileDiskTools tools;
  agent::CacheStore store;
  agent::CacheRefresher refresher;
};

}  // namespace

TEST_CASE("a refresh boots a builder with the script and both disks, and adopts what it left",
          "[caches]") {
  RefreshHost refresh;
  auto outcome =
      std::async(std::launch::async, [&] { return refresh.refresher.refresh("docker"); });
  const auto builder = refresh.builder();
  CHECK_THAT(builder.guest->user_data,
             Catch::Contains(wire::base64_encode("#!/bin/sh\ndocker pull debian:12\n")));
  CHECK_THAT(builder.guest->user_data, !Catch::Contains("cache-builder.invalid"));
  CHECK(builder.caches.empty());
  const auto disks = refresh.cache.host.hypervisor.disk_paths(builder.domain_uuid);
  REQUIRE(disks.size() == 3);
  CHECK(disks.at(1) == (refresh.scratch_caches() / "docker" / "work-1.qcow2").string());
  CHECK(disks.at(2) == (refresh.scratch_caches() / "docker" / "status-1.raw").string());
  CHECK_FALSE(refresh.refresher.start("docker"));  // one refresh of a cache at a time
  // garm never sees it: it is no controller's instance.
  CHECK(refresh.cache.service->list(kControllerId, pool_id(kPool)).empty());

  refresh.finish(builder, "garm-edge-refresh exit=0\npulled debian:12\n");
  const auto result = outcome.get();
  CHECK(result.ok);
  CHECK(result.error.empty());
  REQUIRE(refresh.store.current("docker"));
  CHECK(refresh.store.current("docker")->number == 1);
  CHECK_FALSE(refresh.cache.host.store.get(builder.domain_name));
  CHECK_FALSE(refresh.cache.host.hypervisor.find_by_uuid(builder.domain_uuid));
}

TEST_CASE("a refresh asked while one is under way follows it to its outcome", "[caches]") {
  RefreshHost refresh;
  REQUIRE(refresh.refresher.start("docker"));  // the agent's own refresh, as at its start
  const auto builder = refresh.builder();
  // The operator's `caches refresh docker`: it waits for the one under way and says how it
  // ended, rather than failing with "under way already" or booting a second builder.
  auto followed =
      std::async(std::launch::async, [&] { return refresh.refresher.refresh("docker"); });
  CHECK(followed.wait_for(std::chrono::milliseconds(200)) == std::future_status::timeout);
  refresh.finish(builder, "garm-edge-refresh exit=0\npulled debian:12\n");
  const auto result = followed.get();
  CHECK(result.ok);
  CHECK(result.error.empty());
  REQUIRE(refresh.store.current("docker"));
  CHECK(refresh.store.current("docker")->number == 1);
  CHECK(refresh.store.states().at(0).refreshes_ok == 1);  // one builder, one refresh
}

TEST_CASE("a failing refresh keeps the last generation and says why, builder removed", "[caches]") {
  RefreshHost refresh;
  SECTION("the script fails") {
    auto outcome =
        std::async(std::launch::async, [&] { return refresh.refresher.refresh("docker"); });
    const auto builder = refresh.builder();
    refresh.finish(builder, "garm-edge-refresh exit=3\nError: pull access denied for privat\n");
    const auto result = outcome.get();
    CHECK_FALSE(result.ok);
    CHECK_THAT(result.error,
               Catch::Contains("exited with 3") && Catch::Contains("pull access denied"));
    CHECK_FALSE(refresh.cache.host.store.get(builder.domain_name));
  }
  SECTION("the script never ran") {
    auto outcome =
        std::async(std::launch::async, [&] { return refresh.refresher.refresh("docker"); });
    const auto builder = refresh.builder();
    refresh.finish(builder, "");
    CHECK_THAT(outcome.get().error, Catch::Contains("never ran"));
  }
  SECTION("the builder never powers off") {
    refresh.cache.host.config.caches.at(0).refresh.timeout = std::chrono::seconds(1);
    const auto result = refresh.refresher.refresh("docker");
    CHECK_THAT(result.error, Catch::Contains("did not power off"));
  }
  CHECK_FALSE(refresh.store.current("docker"));
  CHECK(refresh.store.states().at(0).refreshes_failed == 1);
  CHECK(refresh.cache.host.hypervisor
            .list({{"controller-id", std::string(agent::kCacheBuilderControllerId)}})
            .empty());
}
