#include "net/fair_share.hpp"

#include <set>
#include <string>

#include <catch2/catch.hpp>

using garm_edge::net::FairShare;
using namespace std::chrono_literals;

namespace {

struct Recorder {
  std::set<std::string> evicted;
  FairShare::Evict note(const std::string& name) {
    return [this, name] { evicted.insert(name); };
  }
};

}  // namespace

TEST_CASE("free slots take a burst from one key, nobody is evicted while slots are free",
          "[net][fair_share]") {
  FairShare share({.total = 4, .stalled_after = 2s});
  Recorder record;
  for (int i = 0; i < 4; ++i) {
    CHECK(share.admit("10.0.0.1", record.note(std::to_string(i))));
  }
  CHECK(record.evicted.empty());
  CHECK(share.held_by("10.0.0.1") == 4);
}

TEST_CASE("four keys holding every slot with fresh stalled entries cannot keep a fifth out",
          "[net][fair_share]") {
  FairShare share({.total = 64, .stalled_after = 2s});
  Recorder record;
  const auto start = FairShare::Clock::now();
  for (int address = 0; address < 4; ++address) {
    for (int i = 0; i < 16; ++i) {
      const auto name = std::to_string(address) + "/" + std::to_string(i);
      REQUIRE(share.admit("198.51.100." + std::to_string(address), record.note(name), start));
    }
  }
  // Nobody has stalled for 2 s yet, but the newcomer holds nothing and they hold 16 each.
  const auto garm = share.admit("192.0.2.7", record.note("garm"), start + 10ms);
  REQUIRE(garm);
  CHECK(record.evicted.size() == 1);
  CHECK(share.held_by("192.0.2.7") == 1);
  // An attacker's reconnect holds 15 or 16 and finds nobody two above it: garm keeps its slot.
  share.admit("198.51.100.0", record.note("again"), start + 20ms);
  share.admit("198.51.100.1", record.note("again"), start + 20ms);
  CHECK(share.held_by("192.0.2.7") == 1);
  CHECK(record.evicted.count("garm") == 0);
}

TEST_CASE("a stalled entry is taken before a live one, whatever its key", "[net][fair_share]") {
  FairShare share({.total = 3, .stalled_after = 2s});
  Recorder record;
  const auto start = FairShare::Clock::now();
  const auto stalled = share.admit("10.0.0.1", record.note("stalled"), start);
  const auto live = share.admit("10.0.0.2", record.note("live"), start);
  const auto other = share.admit("10.0.0.2", record.note("other"), start);
  REQUIRE((stalled && live && other));
  share.progressed(*live, start + 2500ms);
  share.progressed(*other, start + 2500ms);
  // 10.0.0.2 holds the most, but 10.0.0.1's entry made no progress for 3 s.
  REQUIRE(share.admit("10.0.0.3", record.note("newcomer"), start + 3s));
  CHECK(record.evicted == std::set<std::string>{"stalled"});
}

TEST_CASE("when every slot holds live work of keys at the newcomer's share, it is refused",
          "[net][fair_share]") {
  FairShare share({.total = 2, .stalled_after = 2s});
  Recorder record;
  const auto start = FairShare::Clock::now();
  REQUIRE(share.admit("10.0.0.1", record.note("first"), start));
  REQUIRE(share.admit("10.0.0.2", record.note("second"), start));
  // Holding 0 against 1 each: taking one would only swap places.
  CHECK_FALSE(share.admit("10.0.0.3", record.note("third"), start + 1s));
  CHECK(record.evicted.empty());
  CHECK(share.size() == 2);
  CHECK(share.admit("10.0.0.3", record.note("third"), start + 3s));  // now both have stalled
  CHECK(record.evicted == std::set<std::string>{"first"});
}

TEST_CASE("entries that are not evictable are never taken", "[net][fair_share]") {
  FairShare share({.total = 2, .stalled_after = 1s});
  Recorder record;
  const auto start = FairShare::Clock::now();
  const auto busy = share.admit("controller-a", record.note("busy"), start);
  const auto idle = share.admit("controller-a", record.note("idle"), start);
  REQUIRE((busy && idle));
  share.set_evictable(*busy, false);  // a request of its runs
  REQUIRE(share.admit("controller-b", record.note("b"), start + 5s));
  CHECK(record.evicted == std::set<std::string>{"idle"});
  CHECK_FALSE(share.admit("controller-c", record.note("c"), start + 5s));  // only busy and b left
  share.set_evictable(*busy, true);
  CHECK(share.admit("controller-c", record.note("c"), start + 10s));
  CHECK(record.evicted == std::set<std::string>{"idle", "busy"});
}

TEST_CASE("released and evicted tickets free their slot once", "[net][fair_share]") {
  FairShare share({.total = 1, .stalled_after = 0ms});
  Recorder record;
  const auto first = share.admit("10.0.0.1", record.note("first"));
  REQUIRE(first);
  REQUIRE(share.admit("10.0.0.1", record.note("second")));  // stalled_after 0: oldest goes
  CHECK(record.evicted == std::set<std::string>{"first"});
  share.release(*first);  // already evicted: nothing happens
  CHECK(share.size() == 1);
  CHECK(share.evictions() == 1);
}
