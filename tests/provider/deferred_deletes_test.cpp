// The provider's kept deletes: one synced file each, held by one process at a time.
#include "provider/deferred_deletes.hpp"

#include <atomic>
#include <fstream>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

#include <catch2/catch.hpp>

#include "common/durable_file.hpp"
#include "common/temp_dir.hpp"
#include "provider/provider_metrics.hpp"

using garm_edge::DurableFileError;
using garm_edge::TempDir;
using garm_edge::provider::DeferredDelete;
using garm_edge::provider::DeferredDeletes;

namespace {

const std::string kDeletesController = "9dcf590a-1192-4a9c-b3e4-e0902974c2c0";

DeferredDelete entry(const std::string& agent, const std::string& ref, int seconds = 100) {
  return {.controller = kDeletesController,
          .agent = agent,
          .ref = ref,
          .url = "https://" + agent + ":8443",
          .recorded_at = std::chrono::system_clock::time_point(std::chrono::seconds(seconds)),
          .reason = "cannot connect"};
}

}  // namespace

TEST_CASE("deferred deletes: kept per agent, oldest first, once per name, until forgotten",
          "[provider]") {
  const TempDir dir;
  DeferredDeletes kept(dir.path() / "sessions");
  kept.record(entry("b", "garm-two", 200));
  kept.record(entry("b", "garm-one", 100));
  kept.record(entry("b", "garm-one", 300));  // a repeat keeps the first date
  kept.record(entry("c", "garm-one", 150));
  const auto on_b = kept.pending(kDeletesController, "b");
  REQUIRE(on_b.size() == 2);
  CHECK(on_b[0].ref == "garm-one");
  CHECK(on_b[0].recorded_at.time_since_epoch() == std::chrono::seconds(100));
  CHECK(on_b[1].ref == "garm-two");
  CHECK(kept.all().size() == 3);
  CHECK(kept.pending("5a3e2b1c-0d9f-4e8a-b7c6-d5e4f3a2b1c0", "b").empty());

  // Another process (here: another open file) holding an entry keeps it from this one.
  auto held = kept.try_hold(on_b[0]);
  REQUIRE(held);
  CHECK_FALSE(kept.try_hold(on_b[0]));
  const auto all_of_name =
      kept.hold_all(kDeletesController, "garm-one", std::chrono::milliseconds(100));
  CHECK_FALSE(all_of_name.complete);  // b's is held already
  REQUIRE(all_of_name.held.size() == 1);
  CHECK(all_of_name.held.front().entry().agent == "c");
  kept.forget(*held);
  CHECK(kept.pending(kDeletesController, "b").size() == 1);
  CHECK_FALSE(kept.try_hold(on_b[0]));  // forgotten: nothing to hold
}

TEST_CASE("deferred deletes: refuses what it cannot keep safely", "[provider]") {
  const TempDir dir;
  DeferredDeletes kept(dir.path() / "sessions");
  CHECK_THROWS_AS(kept.record(entry("../b", "garm-one")), DurableFileError);
  CHECK_THROWS_AS(kept.record(entry("b", std::string(101, 'x'))), DurableFileError);
  kept.record(entry("b", std::string(100, 'x')));  // the longest, temp file name and all
  auto bad = entry("b", "garm-one");
  bad.controller = "not-a-uuid";
  CHECK_THROWS_AS(kept.record(bad), DurableFileError);
  // Names with a slash or a dot-dot are hex in the file name: they stay inside the directory.
  kept.record(entry("b", "../../etc/passwd"));
  CHECK(kept.pending(kDeletesController, "b").at(0).ref == "../../etc/passwd");
}

TEST_CASE("deferred deletes: 40 written at once for one agent are all kept", "[provider]") {
  // garm runs DeleteInstance in parallel; each kept delete must not remove the temp file
  // another writer is about to rename.
  const TempDir dir;
  DeferredDeletes kept(dir.path() / "sessions");
  std::vector<std::thread> writers;
  std::atomic<int> failed{0};
  for (int i = 0; i < 40; ++i) {
    writers.emplace_back([&, i] {
      try {
        kept.record(entry("unreachable", "garm-" + std::to_string(i)));
      } catch (const DurableFileError&) {
        ++failed;
      }
    });
  }
  for (auto& writer : writers) {
    writer.join();
  }
  CHECK(failed == 0);
  CHECK(kept.pending(kDeletesController, "unreachable").size() == 40);
}

TEST_CASE("deferred deletes: only a gone writer's temp file is stale", "[provider]") {
  const TempDir dir;
  DeferredDeletes kept(dir.path() / "sessions");
  kept.record(entry("b", "garm-one"));
  const auto directory = dir.path() / "sessions" / "deferred-deletes" / kDeletesController / "b";
  REQUIRE(std::filesystem::is_directory(directory));
  const pid_t gone = ::fork();
  if (gone == 0) {
    ::_exit(0);
  }
  ::waitpid(gone, nullptr, 0);
  const auto crashed = directory / (".x.tmp." + std::to_string(gone) + ".0");
  const auto writing = directory / (".y.tmp." + std::to_string(::getppid()) + ".0");
  std::ofstream(crashed) << "half";
  std::ofstream(writing) << "half";
  kept.record(entry("b", "garm-two"));
  CHECK_FALSE(std::filesystem::exists(crashed));
  CHECK(std::filesystem::exists(writing));  // a live process (this one's parent) may be writing it
}

TEST_CASE("deferred deletes: a session directory others can write or own is refused",
          "[provider]") {
  const TempDir dir;
  const auto sessions = dir.path() / "sessions";
  std::filesystem::create_directories(sessions);
  std::filesystem::permissions(sessions, std::filesystem::perms::others_write,
                               std::filesystem::perm_options::add);
  DeferredDeletes kept(sessions);
  CHECK_THROWS_WITH(kept.record(entry("b", "garm-one")), Catch::Contains("writable by other"));
  std::filesystem::permissions(sessions, std::filesystem::perms::others_write,
                               std::filesystem::perm_options::remove);
  kept.record(entry("b", "garm-one"));
  if (::geteuid() == 0) {
    // garm's account (here: nobody) must not keep its deletes in a directory of another.
    std::filesystem::permissions(dir.path(), std::filesystem::perms::others_exec,
                                 std::filesystem::perm_options::add);
    const pid_t child = ::fork();
    if (child == 0) {
      bool refused = false;
      if (::setgid(65534) == 0 && ::setuid(65534) == 0) {
        try {
          DeferredDeletes(sessions).record(entry("c", "garm-two"));
        } catch (const DurableFileError& e) {
          refused = std::string(e.what()).find("belongs to uid 0") != std::string::npos;
        }
      }
      ::_exit(refused ? 0 : 1);
    }
    int status = 0;
    ::waitpid(child, &status, 0);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
}

TEST_CASE("kept deletes in Prometheus text: per controller and agent, with the oldest's time",
          "[provider][metrics]") {
  const TempDir dir;
  DeferredDeletes kept(dir.path() / "sessions");
  kept.record(entry("b", "garm-two", 200));
  kept.record(entry("b", "garm-one", 100));
  kept.record(entry("a", "garm-three", 300));
  const auto text = garm_edge::provider::render_provider_metrics(kept.all());
  const auto labels = "{controller=\"" + kDeletesController + "\",agent=";
  CHECK_THAT(text, Catch::Contains("garm_edge_provider_kept_deletes" + labels + "\"b\"} 2\n") &&
                       Catch::Contains("garm_edge_provider_kept_deletes" + labels + "\"a\"} 1\n") &&
                       Catch::Contains("garm_edge_provider_oldest_kept_delete_timestamp_seconds" +
                                       labels + "\"b\"} 100\n"));
  CHECK_THAT(garm_edge::provider::render_provider_metrics({}),
             Catch::Contains("# TYPE garm_edge_provider_kept_deletes gauge"));
}
