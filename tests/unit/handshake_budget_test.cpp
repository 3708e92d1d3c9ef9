#include "net/handshake_budget.hpp"

#include <set>

#include <catch2/catch.hpp>

using garm_edge::net::HandshakeBudget;

namespace {

struct Recorder {
  std::set<std::string> evicted;
  HandshakeBudget::Evict note(const std::string& name) {
    return [this, name] { evicted.insert(name); };
  }
};

}  // namespace

TEST_CASE("free slots take a burst from one address; a full budget evicts the oldest silent one",
          "[net][budget]") {
  HandshakeBudget budget({.total = 4, .per_peer = 2});
  Recorder record;
  const auto a1 = budget.admit("10.0.0.1", record.note("a1"));
  const auto a2 = budget.admit("10.0.0.1", record.note("a2"));
  REQUIRE(a1);
  REQUIRE(a2);
  REQUIRE(record.evicted.empty());
  CHECK(budget.admit("10.0.0.1", record.note("a3")));  // beyond its share, into free slots
  CHECK(budget.admit("10.0.0.1", record.note("a4")));
  CHECK(record.evicted.empty());

  budget.progressed(*a2);
  CHECK(budget.admit("10.0.0.1", record.note("a5")));    // full and over its share: its own
  CHECK(record.evicted == std::set<std::string>{"a1"});  // oldest silent, never a2 under way

  CHECK(budget.admit("10.0.0.2", record.note("b1")));  // full: the oldest silent of anyone
  CHECK(record.evicted == std::set<std::string>{"a1", "a3"});
  CHECK(budget.size() == 4);
  CHECK(budget.evictions() == 2);

  budget.release(*a1);  // already evicted: nothing happens
  budget.release(*a2);
  CHECK(budget.size() == 3);
}

TEST_CASE("an address that sends ClientHellos and stalls loses its oldest to a newcomer",
          "[net][budget]") {
  using namespace std::chrono_literals;
  HandshakeBudget budget({.total = 64, .per_peer = 16, .stalled_after = 2s});
  Recorder record;
  const auto start = HandshakeBudget::Clock::now();
  for (int i = 0; i < 64; ++i) {
    const auto ticket = budget.admit("198.51.100.9", record.note(std::to_string(i)), start);
    REQUIRE(ticket);
    budget.progressed(*ticket, start);
  }
  // Handshakes under way for less than 2 s are real ones: nobody cuts them, not even a
  // newcomer from another address.
  CHECK_FALSE(budget.admit("192.0.2.7", record.note("early"), start + 1s));
  CHECK(record.evicted.empty());
  const auto later = start + 3s;
  CHECK_FALSE(budget.admit("198.51.100.9", record.note("more"), later));  // its own get no more
  CHECK(record.evicted.empty());
  const auto legit = budget.admit("192.0.2.7", record.note("legit"), later);
  REQUIRE(legit);
  CHECK(record.evicted == std::set<std::string>{"0"});
  budget.progressed(*legit, later);
  CHECK(budget.admit("192.0.2.8", record.note("legit2"), later));
  CHECK(record.evicted == std::set<std::string>{"0", "1"});  // never the one within its share
}

TEST_CASE("when every slot holds a handshake under way, the newcomer is refused", "[net][budget]") {
  HandshakeBudget budget({.total = 2, .per_peer = 2});
  Recorder record;
  budget.progressed(*budget.admit("10.0.0.1", record.note("first")));
  budget.progressed(*budget.admit("10.0.0.2", record.note("second")));
  CHECK_FALSE(budget.admit("10.0.0.3", record.note("third")));
  CHECK(record.evicted.empty());
  CHECK(budget.size() == 2);
}

TEST_CASE("a silent flood never displaces a handshake under way, from any address",
          "[net][budget]") {
  HandshakeBudget budget({.total = 64, .per_peer = 16});
  Recorder record;
  const auto legit = budget.admit("192.0.2.7", record.note("legit"));
  REQUIRE(legit);
  budget.progressed(*legit);
  for (int i = 0; i < 1000; ++i) {  // 50 addresses, 20 silent connections each
    CHECK(budget.admit("198.51.100." + std::to_string(i % 50), record.note(std::to_string(i))));
  }
  CHECK(record.evicted.count("legit") == 0);
  CHECK(budget.size() == 64);
  // A newcomer from the legitimate client's address still gets in, and so would its next.
  CHECK(budget.admit("192.0.2.7", record.note("legit2")));
}
