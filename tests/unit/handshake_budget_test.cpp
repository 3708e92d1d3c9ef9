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

TEST_CASE("a full handshake budget evicts the oldest silent handshake, never the newcomer",
          "[net][budget]") {
  HandshakeBudget budget({.total = 4, .per_peer = 2});
  Recorder record;
  const auto a1 = budget.admit("10.0.0.1", record.note("a1"));
  const auto a2 = budget.admit("10.0.0.1", record.note("a2"));
  budget.admit("10.0.0.1", record.note("a3"));
  CHECK(record.evicted == std::set<std::string>{"a1"});  // the address's own share is full

  budget.spoke(a2);
  budget.admit("10.0.0.1", record.note("a4"));
  CHECK(record.evicted == std::set<std::string>{"a1", "a3"});  // silent goes before speaking

  budget.admit("10.0.0.2", record.note("b1"));
  budget.admit("10.0.0.2", record.note("b2"));
  CHECK(budget.size() == 4);
  budget.admit("10.0.0.3", record.note("c1"));  // total full: the oldest silent of anyone
  CHECK(record.evicted == std::set<std::string>{"a1", "a3", "a4"});
  CHECK(budget.size() == 4);
  CHECK(budget.evictions() == 3);

  budget.release(a1);  // already evicted: nothing happens
  budget.release(a2);
  CHECK(budget.size() == 3);
}

TEST_CASE("when every handshake has spoken, the oldest one makes room", "[net][budget]") {
  HandshakeBudget budget({.total = 2, .per_peer = 2});
  Recorder record;
  budget.spoke(budget.admit("10.0.0.1", record.note("first")));
  budget.spoke(budget.admit("10.0.0.2", record.note("second")));
  budget.admit("10.0.0.3", record.note("third"));
  CHECK(record.evicted == std::set<std::string>{"first"});
}

TEST_CASE("a flood from one address never displaces another address's handshake", "[net][budget]") {
  HandshakeBudget budget({.total = 64, .per_peer = 16});
  Recorder record;
  const auto legit = budget.admit("192.0.2.7", record.note("legit"));
  budget.spoke(legit);
  for (int i = 0; i < 1000; ++i) {
    budget.admit("198.51.100.1", record.note("flood" + std::to_string(i)));
  }
  CHECK(record.evicted.count("legit") == 0);
  CHECK(budget.size() == 17);
}
