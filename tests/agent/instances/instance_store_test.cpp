#include "agent/instances/instance_store.hpp"

#include <fstream>
#include <sys/stat.h>

#include <catch2/catch.hpp>

#include "common/temp_dir.hpp"

using namespace garm_edge::agent;
using garm_edge::TempDir;

namespace {

InstanceRecord sample_record(const std::string& name) {
  InstanceRecord r;
  r.domain_name = "garm-edge-9dcf590a-" + name;
  r.domain_uuid = "0b6f5b8e-3a52-4c8e-9c1f-2a3b4c5d6e7f";
  r.controller_id = "9dcf590a-1192-4a9c-b3e4-e0902974c2c0";
  r.pool_id = "scale <set> & \"co\"-9dcf590a-1192-4a9c-b3e4-e0902974c2c0";
  r.name = name;
  r.image = "debian-12";
  r.flavor = "small";
  r.os_name = "debian";
  r.os_version = "12";
  r.volume_pool = "default";
  r.volume_name = r.domain_name + ".qcow2";
  r.created_at = "2026-11-22T00:30:43Z";
  r.intent = Intent::creating;
  return r;
}

mode_t mode_of(const std::filesystem::path& path) {
  struct stat info {};
  REQUIRE(::stat(path.c_str(), &info) == 0);
  return info.st_mode & 0777;
}

}  // namespace

TEST_CASE("records round-trip through the state directory", "[store]") {
  TempDir dir;
  FileInstanceStore store(dir.path());
  auto record = sample_record("garm-a");
  CHECK_FALSE(store.contains(record.domain_name));
  store.put(record);
  CHECK(store.contains(record.domain_name));
  CHECK(store.get(record.domain_name) == record);
  record.intent = Intent::created;
  store.put(record);
  CHECK(store.get(record.domain_name)->intent == Intent::created);
  CHECK(store.list() == std::vector<InstanceRecord>{record});
  store.remove(record.domain_name);
  CHECK_FALSE(store.get(record.domain_name).has_value());
  CHECK_FALSE(store.contains(record.domain_name));
  CHECK_NOTHROW(store.remove(record.domain_name));  // removing twice is fine
}

TEST_CASE("a record's guest part round-trips, reports included", "[store]") {
  TempDir dir;
  FileInstanceStore store(dir.path());
  auto record = sample_record("garm-g");
  GuestRecord guest;
  guest.network = "default";
  guest.mac = "52:54:00:01:02:03";
  guest.ip = "192.168.122.5";
  guest.seed_token_hash = std::string(64, 'a');
  guest.bearer_token_hash = std::string(64, 'b');
  guest.callback_url = "https://garm.example.com/api/v1/callbacks";
  guest.user_data = "#cloud-config\nusers: [default]\n";
  guest.runner_status = "installing";
  guest.agent_id = 42;
  guest.messages.push_back(
      {.time = "2026-11-22T00:00:00Z", .status = "installing", .message = "\u00e9"});
  record.guest = guest;
  store.put(record);
  CHECK(store.get(record.domain_name) == record);
}

TEST_CASE("the state directory and records are private", "[store]") {
  TempDir dir;
  const auto state = dir.path() / "state";
  FileInstanceStore store(state);
  store.put(sample_record("garm-a"));
  CHECK(mode_of(state) == 0700);
  CHECK(mode_of(state / "instances") == 0700);
  CHECK(mode_of(state / "instances" / "garm-edge-9dcf590a-garm-a.json") == 0600);
}

TEST_CASE("an unreadable record is skipped by list and refused by get, never taken as absent",
          "[store]") {
  TempDir dir;
  FileInstanceStore store(dir.path());
  store.put(sample_record("garm-a"));
  const auto torn = dir.path() / "instances" / "garm-edge-9dcf590a-garm-b.json";
  std::ofstream(torn) << "{ torn";
  const auto records = store.list();
  REQUIRE(records.size() == 1);
  CHECK(records[0].name == "garm-a");
  CHECK_THROWS_AS(store.get("garm-edge-9dcf590a-garm-b"), StoreError);
  CHECK(store.contains("garm-edge-9dcf590a-garm-b"));  // present, though unreadable
  CHECK(std::filesystem::exists(torn));                // left for an operator to look at
}

TEST_CASE("a record from another format version is refused, not guessed at", "[store]") {
  TempDir dir;
  FileInstanceStore store(dir.path());
  std::ofstream(dir.path() / "instances" / "garm-edge-x.json")
      << R"({"version":2,"intent":"created"})";
  CHECK_THROWS_WITH(store.get("garm-edge-x"),
                    Catch::Contains("unsupported instance record version"));
}

TEST_CASE("one process at a time holds a state directory", "[store]") {
  TempDir dir;
  std::string first_id;
  {
    FileInstanceStore store(dir.path());
    first_id = store.state_id();
    CHECK_THROWS_WITH(FileInstanceStore(dir.path()), Catch::Contains("in use by another"));
  }
  FileInstanceStore reopened(dir.path());  // the lock went with the first store
  CHECK(reopened.state_id() == first_id);  // and the state ID persists
  TempDir other;
  CHECK(FileInstanceStore(other.path()).state_id() != first_id);
}

TEST_CASE("temp files of an interrupted write are removed at startup, never read", "[store]") {
  TempDir dir;
  {
    FileInstanceStore store(dir.path());
    store.put(sample_record("garm-a"));
  }
  const auto stale = dir.path() / "instances" / ".garm-edge-9dcf590a-garm-a.json.tmp.123.0";
  std::ofstream(stale) << "{ half written";
  FileInstanceStore reopened(dir.path());
  CHECK_FALSE(std::filesystem::exists(stale));
  CHECK(reopened.list().size() == 1);
}

TEST_CASE("record names that could escape the directory are refused", "[store]") {
  TempDir dir;
  FileInstanceStore store(dir.path());
  auto record = sample_record("garm-a");
  for (const std::string& bad : std::vector<std::string>{"../x", "a/b", ".hidden", "", "a..b"}) {
    record.domain_name = bad;
    CHECK_THROWS_AS(store.put(record), StoreError);
    CHECK_THROWS_AS(store.get(bad), StoreError);
  }
}

TEST_CASE("unusable state directories fail at startup", "[store]") {
  TempDir dir;
  std::ofstream(dir.path() / "file") << "x";
  CHECK_THROWS_AS(FileInstanceStore(dir.path() / "file"), StoreError);
}
