#include "agent/guests/assignment_waiters.hpp"

#include <atomic>
#include <future>
#include <memory>
#include <set>

#include <catch2/catch.hpp>

using namespace garm_edge;
using namespace std::chrono_literals;

namespace {

/// Guests bound (their answer is there) and saved (they wait on), as the guest service
/// would say; the waiters' only view of them.
struct Guests {
  std::mutex mutex;
  std::set<std::string> bound;
  std::set<std::string> saved;
  std::atomic<int> expiries{0};

  agent::AssignmentWaiters::Answer answer() {
    return [this](const std::string& domain, bool expired) -> std::optional<net::HttpResponse> {
      std::lock_guard lock(mutex);
      expiries += expired ? 1 : 0;
      if (bound.contains(domain)) {
        net::HttpResponse answer;
        answer.body = "assignment of " + domain;
        return answer;
      }
      if (!expired || saved.contains(domain)) {
        return std::nullopt;
      }
      return agent::no_assignment_yet();
    };
  }
  void bind(const std::string& domain) {
    std::lock_guard lock(mutex);
    bound.insert(domain);
  }
};

struct Poll {
  std::shared_ptr<std::promise<net::HttpResponse>> answered =
      std::make_shared<std::promise<net::HttpResponse>>();
  std::future<net::HttpResponse> future = answered->get_future();

  agent::AssignmentWaiters::Respond respond() const {
    return [answered = answered](net::HttpResponse response) {
      answered->set_value(std::move(response));
    };
  }
  bool pending(std::chrono::milliseconds for_how_long = 0ms) const {
    return future.wait_for(for_how_long) == std::future_status::timeout;
  }
};

// No sweep: an answer that comes comes from the wake (or the wait's end).
constexpr agent::AssignmentWaiters::Timing kNoSweep{
    .after_wake = 20ms, .woken_for = 2s, .sweep = std::chrono::hours(1)};

}  // namespace

TEST_CASE("a warm guest's long poll is answered as soon as it is bound", "[guests][warm]") {
  Guests guests;
  agent::AssignmentWaiters waiters(guests.answer(), kNoSweep);
  Poll poll;
  waiters.park("warm-1", 30s, poll.respond());
  CHECK(poll.pending(200ms));
  CHECK(waiters.waiting() == 1);

  guests.bind("warm-1");
  waiters.wake("warm-1");
  REQUIRE_FALSE(poll.pending(10s));  // long before its 30 s
  const auto response = poll.future.get();
  CHECK(response.status == 200);
  CHECK(response.body == "assignment of warm-1");
  CHECK(waiters.waiting() == 0);
}

TEST_CASE("a guest bound before it asks gets its assignment without waiting", "[guests][warm]") {
  Guests guests;
  agent::AssignmentWaiters waiters(guests.answer(), kNoSweep);
  guests.bind("warm-1");
  Poll poll;
  waiters.park("warm-1", 30s, poll.respond());
  REQUIRE_FALSE(poll.pending(10s));
  CHECK(poll.future.get().status == 200);
}

TEST_CASE("a woken guest whose answer is late is asked again soon", "[guests][warm]") {
  Guests guests;
  agent::AssignmentWaiters waiters(guests.answer(), kNoSweep);
  Poll poll;
  waiters.park("warm-1", 30s, poll.respond());
  waiters.wake("warm-1");  // e.g. its record still locked by the create that binds it
  CHECK(poll.pending(100ms));
  guests.bind("warm-1");
  REQUIRE_FALSE(poll.pending(10s));
  CHECK(poll.future.get().status == 200);
}

TEST_CASE("a long poll ends with 204 when its wait does, a saved guest's waits on",
          "[guests][warm]") {
  Guests guests;
  guests.saved.insert("saved-1");
  agent::AssignmentWaiters waiters(guests.answer(), kNoSweep);
  Poll running;
  Poll saved;
  waiters.park("warm-1", 50ms, running.respond());
  waiters.park("saved-1", 50ms, saved.respond());
  REQUIRE_FALSE(running.pending(10s));
  CHECK(running.future.get().status == 204);

  while (guests.expiries < 4) {  // the saved guest's wait ended three times over
    std::this_thread::sleep_for(10ms);
  }
  CHECK(saved.pending());
  guests.bind("saved-1");  // restored and bound: the answer goes on the poll it kept
  waiters.wake("saved-1");
  REQUIRE_FALSE(saved.pending(10s));
  CHECK(saved.future.get().status == 200);
}

TEST_CASE("a guest's second long poll ends its first, so one guest holds one", "[guests][warm]") {
  Guests guests;
  agent::AssignmentWaiters waiters(guests.answer(), kNoSweep);
  std::vector<Poll> polls(100);
  for (const auto& poll : polls) {
    waiters.park("warm-1", 30s, poll.respond());
  }
  CHECK(waiters.waiting() == 1);
  for (std::size_t i = 0; i + 1 < polls.size(); ++i) {
    REQUIRE_FALSE(polls[i].pending());
    CHECK(polls[i].future.get().status == 204);
  }
  CHECK(polls.back().pending());
  waiters.park("warm-2", 30s, Poll().respond());
  CHECK(waiters.waiting() == 2);
}

TEST_CASE("stopped waiters drop their polls unanswered and park no more", "[guests][warm]") {
  Guests guests;
  agent::AssignmentWaiters waiters(guests.answer(), kNoSweep);
  Poll before;
  waiters.park("warm-1", 30s, before.respond());
  waiters.stop();
  CHECK(waiters.waiting() == 0);
  Poll after;
  waiters.park("warm-2", 30s, after.respond());
  CHECK(waiters.waiting() == 0);
  guests.bind("warm-1");
  waiters.wake("warm-1");
  // Dropped: nothing holds its answer any more, and it was never given one.
  CHECK(before.pending(200ms));
  CHECK(before.answered.use_count() == 1);
  CHECK(after.answered.use_count() == 1);
}

TEST_CASE("a state read that fails answers 503 and the next poll is served", "[guests][warm]") {
  std::atomic<bool> failing{true};
  agent::AssignmentWaiters waiters(
      [&](const std::string&, bool) -> std::optional<net::HttpResponse> {
        if (failing) {
          throw std::runtime_error("unreadable record");
        }
        return net::HttpResponse{};
      },
      kNoSweep);
  Poll first;
  waiters.park("warm-1", 30s, first.respond());
  REQUIRE_FALSE(first.pending(10s));
  CHECK(first.future.get().status == 503);
  failing = false;
  Poll second;
  waiters.park("warm-1", 30s, second.respond());
  REQUIRE_FALSE(second.pending(10s));
  CHECK(second.future.get().status == 200);
}

TEST_CASE("a warm guest's wait is whole seconds, capped", "[guests][warm]") {
  const auto wait_of = [](std::string query) {
    net::HttpRequest request;
    request.query = std::move(query);
    return agent::requested_wait(request, 60);
  };
  CHECK(wait_of("wait=30") == 30s);
  CHECK(wait_of("x=1&wait=5") == 5s);
  CHECK(wait_of("wait=100000") == 60s);
  CHECK_FALSE(wait_of("wait=0"));
  CHECK_FALSE(wait_of("wait=-1"));
  CHECK_FALSE(wait_of("wait=3s"));
  CHECK_FALSE(wait_of("wait="));
  CHECK_FALSE(wait_of("wait=99999999999999999999"));
  CHECK_FALSE(wait_of(""));
  CHECK_FALSE(wait_of("waited=3"));
}
