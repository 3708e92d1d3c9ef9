// Cache generations on disk: made from a builder's work disk, swapped in, the replaced ones kept
// while guests use them; [[caches]] as the operator writes it; what a builder reports.
#include "agent/caches/cache_store.hpp"

#include <fstream>

#include <catch2/catch.hpp>

#include "agent/base/config.hpp"
#include "agent/caches/cache_refresher.hpp"
#include "common/temp_dir.hpp"
#include "support/file_disk_tools.hpp"
#include "support/quiet_logger.hpp"
#include "support/settable_clock.hpp"
#include "userdata/userdata.hpp"
#include "wire/base64.hpp"

using garm_edge::testing::QuietLogger;
using namespace garm_edge;
using garm_edge::testing::FileDiskTools;
using garm_edge::testing::SettableClock;

namespace {

const std::string kCacheController = "9dcf590a-1192-4a9c-b3e4-e0902974c2c0";

/// An image, a flavor and the guest service: what every [[caches]] entry below needs.
const std::string kHostWithGuests = R"toml(
[libvirt]
network = "garm"
[guests]
[[images]]
name = "debian-12"
base_path = "/images/debian-12.qcow2"
[[flavors]]
name = "small"
)toml";

std::string read_all(const std::filesystem::path& file) {
  std::ifstream in(file);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

struct CacheHost {
  CacheHost() {
    std::ofstream(state.path() / "refresh.sh") << "#!/bin/sh\ndocker pull debian:12\n";
    config = agent::parse_agent_config(R"toml(
[agent]
state_dir = ")toml" + (state.path() / "state").string() +
                                           R"toml("
caches_dir = ")toml" + (state.path() / "caches").string() +
                                           "\"\n" + kHostWithGuests + R"toml(
[[caches]]
name = "docker"
size_gib = 40
mount = "/var/lib/docker"
controller = ")toml" + kCacheController + R"toml("
images = ["debian-12"]
refresh_script = ")toml" + (state.path() / "refresh.sh").string() +
                                           R"toml("
refresh_every_hours = 12
)toml",
                                       "agent.toml");
  }
  TempDir state;
  agent::AgentConfig config;
  FileDiskTools tools;
  SettableClock clock;
  QuietLogger log;
  const std::atomic<bool> stop{false};
};

agent::CacheGeneration refreshed(agent::CacheStore& store, const std::atomic<bool>& stop) {
  REQUIRE(store.begin_refresh("docker"));
  const auto disks = store.prepare("docker", stop);
  auto generation = store.adopt("docker", disks, stop);
  store.end_refresh("docker", disks, {.ok = true, .finished_at = "", .seconds = 1, .error = ""});
  CHECK_FALSE(std::filesystem::exists(disks.work));
  CHECK_FALSE(std::filesystem::exists(disks.status));
  return generation;
}

}  // namespace

TEST_CASE("[[caches]] is read with its refresh, and serves only its own controller", "[caches]") {
  CacheHost host;
  const auto& cache = host.config.caches.at(0);
  CHECK(cache.size_gib == 40);
  CHECK(cache.filesystem == "ext4");
  CHECK(cache.refresh.image == "debian-12");  // the cache's first image
  CHECK(cache.refresh.flavor == "small");
  CHECK(cache.refresh.every == std::chrono::hours(12));
  CHECK(host.config.cache_directory() == host.state.path() / "caches");
  CHECK(cache.serves(kCacheController, "debian-12", "any-pool", {}));
  CHECK(cache.serves(kCacheController, "ubuntu", "any-pool", {"docker"}));
  CHECK_FALSE(cache.serves(kCacheController, "ubuntu", "any-pool", {}));
  CHECK_FALSE(cache.serves("5a3e2b1c-0d9f-4e8a-b7c6-d5e4f3a2b1c0", "debian-12", "p", {"docker"}));
}

TEST_CASE("[[caches]] refuses what a guest path, a disk or a script cannot be", "[caches]") {
  CacheHost host;
  const auto base = kHostWithGuests + "[[caches]]\ncontroller = \"" + kCacheController + "\"\n";
  const auto script = "refresh_script = \"" + (host.state.path() / "refresh.sh").string() + "\"\n";
  const auto error_of = [&](const std::string& entry) {
    try {
      agent::parse_agent_config(base + entry, "agent.toml");
      return std::string();
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
  };
  CHECK(error_of("name = \"docker\"\nmount = \"/var/lib/docker\"\n" + script).empty());
  CHECK_THAT(error_of("name = \"Docker\"\nmount = \"/var/lib/docker\"\n" + script),
             Catch::Contains("name must be"));
  CHECK_THAT(error_of("name = \"docker\"\nmount = \"/var/lib/../../etc\"\n" + script),
             Catch::Contains("mount must be"));
  CHECK_THAT(error_of("name = \"docker\"\nmount = \"/var/lib/docker;reboot\"\n" + script),
             Catch::Contains("mount must be"));
  CHECK_THAT(
      error_of("name = \"docker\"\nmount = \"/var/lib/docker\"\nfilesystem = \"vfat\"\n" + script),
      Catch::Contains("filesystem must be"));
  CHECK_THAT(
      error_of("name = \"docker\"\nmount = \"/var/lib/docker\"\nimages = [\"nope\"]\n" + script),
      Catch::Contains("image \"nope\" is not configured"));
  CHECK_THAT(error_of("name = \"docker\"\nmount = \"/x\"\nrefresh_script = \"/no/such/script\"\n"),
             Catch::Contains("cannot be read"));
}

TEST_CASE("a refresh's work becomes the next generation, and the replaced one stays while used",
          "[caches]") {
  CacheHost host;
  agent::CacheStore store(host.config, host.tools, host.clock, host.log);
  CHECK_FALSE(store.current("docker"));

  REQUIRE(store.begin_refresh("docker"));
  CHECK_FALSE(store.begin_refresh("docker"));  // one refresh of a cache at a time
  const auto first_disks = store.prepare("docker", host.stop);
  CHECK(read_all(first_disks.work) == "size 42949672960 backing -");  // an empty disk first
  CHECK(std::filesystem::file_size(first_disks.status) == 1024 * 1024);
  const auto first = store.adopt("docker", first_disks, host.stop);
  store.end_refresh("docker", first_disks,
                    {.ok = true, .finished_at = "", .seconds = 1, .error = ""});
  CHECK(first.number == 1);
  CHECK(host.tools.checked == std::vector<std::filesystem::path>{first_disks.work});
  CHECK(store.current("docker")->path == first.path);

  REQUIRE(store.begin_refresh("docker"));
  const auto second_disks = store.prepare("docker", host.stop);
  CHECK(read_all(second_disks.work) == "size 42949672960 backing " + first.path);
  const auto second = store.adopt("docker", second_disks, host.stop);
  store.end_refresh("docker", second_disks,
                    {.ok = true, .finished_at = "", .seconds = 1, .error = ""});
  CHECK(second.number == 2);
  CHECK(store.current("docker")->path == second.path);

  bool first_in_use = true;
  const auto in_use = [&](const std::string& path) { return path == first.path && first_in_use; };
  host.clock.advance(std::chrono::hours(1));
  store.remove_unused(in_use);
  CHECK(std::filesystem::exists(first.path));  // a guest still backs onto it
  first_in_use = false;
  store.remove_unused(in_use);
  CHECK_FALSE(std::filesystem::exists(first.path));
  CHECK(std::filesystem::exists(second.path));  // the current one is never removed

  const agent::CacheStore restarted(host.config, host.tools, host.clock, host.log);
  CHECK(restarted.current("docker")->number == 2);
  CHECK(restarted.states().at(0).refreshes_ok == 2);
  CHECK(restarted.states().at(0).retired == 0);
}

TEST_CASE("a replaced generation is kept for a grace period: a create may have planned onto it",
          "[caches]") {
  CacheHost host;
  agent::CacheStore store(host.config, host.tools, host.clock, host.log);
  const auto first = refreshed(store, host.stop);
  refreshed(store, host.stop);
  const auto unused = [](const std::string&) { return false; };
  store.remove_unused(unused);
  CHECK(std::filesystem::exists(first.path));
  host.clock.advance(std::chrono::minutes(16));
  store.remove_unused(unused);
  CHECK_FALSE(std::filesystem::exists(first.path));
}

TEST_CASE("a failed refresh keeps the last generation and says why, and leftovers go at start",
          "[caches]") {
  CacheHost host;
  agent::CacheStore store(host.config, host.tools, host.clock, host.log);
  const auto good = refreshed(store, host.stop);
  REQUIRE(store.begin_refresh("docker"));
  const auto disks = store.prepare("docker", host.stop);
  store.end_refresh("docker", disks,
                    {.ok = false, .finished_at = "", .seconds = 3, .error = "exited with 1"});
  CHECK(store.current("docker")->path == good.path);
  const auto state = store.states().at(0);
  CHECK(state.refreshes_failed == 1);
  CHECK(state.last_refresh->error == "exited with 1");
  CHECK_FALSE(state.refreshing);

  // An agent killed mid-refresh left its disks.
  std::ofstream(host.state.path() / "caches" / "docker" / "work-9.qcow2") << "x";
  std::ofstream(host.state.path() / "caches" / "docker" / "gen-9.qcow2.tmp") << "x";
  const agent::CacheStore restarted(host.config, host.tools, host.clock, host.log);
  CHECK_FALSE(std::filesystem::exists(host.state.path() / "caches" / "docker" / "work-9.qcow2"));
  CHECK_FALSE(std::filesystem::exists(host.state.path() / "caches" / "docker" / "gen-9.qcow2.tmp"));
  CHECK(restarted.current("docker")->path == good.path);
  CHECK(restarted.states().at(0).last_refresh->error == "exited with 1");
}

TEST_CASE("a builder's status disk says how its script ended, or that it never ran", "[caches]") {
  using agent::parse_builder_status;
  const auto ok = parse_builder_status(std::string("garm-edge-refresh exit=0\npulled\n") +
                                       std::string(100, '\0'));
  REQUIRE(ok);
  CHECK(ok->exit_code == 0);
  CHECK(ok->output == "pulled\n");
  CHECK(parse_builder_status("garm-edge-refresh exit=17\n")->exit_code == 17);
  CHECK_FALSE(parse_builder_status(std::string(4096, '\0')));  // never written
  CHECK_FALSE(parse_builder_status("garm-edge-refresh exit=\n"));
  CHECK_FALSE(parse_builder_status("garm-edge-refresh exit=99999999999999\n"));
  CHECK_FALSE(parse_builder_status("garm-edge-refresh exit=0"));  // torn
}

TEST_CASE("a builder runs the operator's script with the cache mounted, and nothing of garm's",
          "[caches]") {
  const auto user_data =
      userdata::render_cache_builder({.script = "#!/bin/sh\ndocker pull debian:12\n",
                                      .filesystem = "xfs",
                                      .mount = "/var/lib/docker"});
  CHECK(user_data.starts_with("#cloud-config\n"));
  CHECK_THAT(user_data, Catch::Contains(wire::base64_encode("#!/bin/sh\ndocker pull debian:12\n")));
  CHECK_THAT(user_data, Catch::Contains("/var/lib/garm-edge/cache-refresh-wrapper"));
  CHECK_THAT(user_data, Catch::Contains("xfs"));
  CHECK_THAT(user_data, Catch::Contains("/var/lib/docker"));
  CHECK_THROWS(
      userdata::render_cache_builder({.script = "x", .filesystem = "vfat", .mount = "/x"}));
}
