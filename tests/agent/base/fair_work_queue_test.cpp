#include "agent/base/fair_work_queue.hpp"

#include <atomic>
#include <chrono>
#include <future>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

using namespace garm_edge::agent;
using namespace std::chrono_literals;

namespace {

/// Jobs that hold their worker until let go, counting how many of each owner run at once.
class HeldJobs {
 public:
  std::function<void()> job(const std::string& owner) {
    return [this, owner] {
      {
        std::lock_guard lock(mutex_);
        ++running_[owner];
        ++started_[owner];
      }
      let_go_.wait();
      std::lock_guard lock(mutex_);
      --running_[owner];
    };
  }
  std::size_t started(const std::string& owner) {
    std::lock_guard lock(mutex_);
    return started_[owner];
  }
  /// Waits up to 2 s for `owner` to have started `count` jobs.
  bool started_within(const std::string& owner, std::size_t count) {
    const auto deadline = std::chrono::steady_clock::now() + 2s;
    while (started(owner) < count && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(1ms);
    }
    return started(owner) >= count;
  }
  void let_go() { release_.set_value(); }

 private:
  std::promise<void> release_;
  std::shared_future<void> let_go_ = release_.get_future().share();
  std::mutex mutex_;
  std::map<std::string, std::size_t> running_;
  std::map<std::string, std::size_t> started_;
};

}  // namespace

TEST_CASE("a key runs at most its share, its further jobs wait without a worker", "[workers]") {
  FairWorkQueue queue(4, FairWorkQueue::Limits{.per_key = 1, .per_group = 4});
  HeldJobs held;
  for (int i = 0; i < 3; ++i) {
    queue.post(FairWorkQueue::Owner{.key = "guest-a", .group = "x"}, held.job("guest-a"));
  }
  queue.post(FairWorkQueue::Owner{.key = "guest-b", .group = "x"}, held.job("guest-b"));
  CHECK(held.started_within("guest-b", 1));  // a's waiting jobs hold no worker
  REQUIRE(held.started_within("guest-a", 1));
  std::this_thread::sleep_for(20ms);
  CHECK(held.started("guest-a") == 1);
  held.let_go();
  queue.join();
  CHECK(held.started("guest-a") == 3);  // in order, one after another
}

TEST_CASE("one group's keys together run at most the group's share", "[workers]") {
  FairWorkQueue queue(6, FairWorkQueue::Limits{.per_key = 2, .per_group = 2});
  HeldJobs held;
  for (const auto* key : {"a1", "a2", "a3"}) {
    queue.post(FairWorkQueue::Owner{.key = key, .group = "controller-a"}, held.job("controller-a"));
    queue.post(FairWorkQueue::Owner{.key = key, .group = "controller-a"}, held.job("controller-a"));
  }
  queue.post(FairWorkQueue::Owner{.key = "b1", .group = "controller-b"}, held.job("controller-b"));
  queue.post(FairWorkQueue::Owner{.key = "b1", .group = "controller-b"}, held.job("controller-b"));
  CHECK(held.started_within("controller-b", 2));
  REQUIRE(held.started_within("controller-a", 2));
  std::this_thread::sleep_for(20ms);
  CHECK(held.started("controller-a") == 2);
  held.let_go();
  queue.join();
  CHECK(held.started("controller-a") == 6);
}

TEST_CASE("a job that waited past the deadline is answered at the deadline, not run", "[workers]") {
  FairWorkQueue queue(1,
                      FairWorkQueue::Limits{.per_key = 1, .per_group = 1, .queue_deadline = 100ms});
  HeldJobs held;
  queue.post(FairWorkQueue::Owner{.key = "slow", .group = "a"}, held.job("slow"));
  REQUIRE(held.started_within("slow", 1));
  std::promise<std::chrono::steady_clock::time_point> expired_at;
  const auto posted = std::chrono::steady_clock::now();
  std::atomic<bool> ran{false};
  queue.post(
      FairWorkQueue::Owner{.key = "late", .group = "b"}, [&ran] { ran = true; },
      [&expired_at] { expired_at.set_value(std::chrono::steady_clock::now()); });
  auto answered = expired_at.get_future();
  REQUIRE(answered.wait_for(2s) == std::future_status::ready);  // while the worker is still held
  CHECK(answered.get() - posted >= 100ms);
  CHECK(queue.expired() == 1);
  held.let_go();
  queue.join();
  CHECK_FALSE(ran);
}

TEST_CASE("freed workers go round robin over the keys that wait", "[workers]") {
  FairWorkQueue queue(1, FairWorkQueue::Limits{.per_key = 1, .per_group = 1});
  std::promise<void> release;
  auto let_go = release.get_future().share();
  queue.post("first", [let_go] { let_go.wait(); });
  std::vector<std::string> order;
  for (const auto* key : {"a", "a", "a", "b", "c"}) {
    queue.post(key, [&order, key] { order.emplace_back(key); });
  }
  release.set_value();
  queue.join();
  CHECK(order == std::vector<std::string>{"a", "b", "c", "a", "a"});
}

TEST_CASE("however many keys are stuck, the last free worker is a newcomer's", "[workers]") {
  FairWorkQueue queue(4, FairWorkQueue::Limits{.per_key = 2, .per_group = 4});
  HeldJobs held;
  for (const auto* key : {"stuck-a", "stuck-a", "stuck-b", "stuck-b"}) {
    queue.post(key, held.job(key));  // keys in no group, as the API's client certificates
  }
  queue.post("newcomer", held.job("newcomer"));
  CHECK(held.started_within("newcomer", 1));  // without the reserve: a and b held all four
  REQUIRE(held.started_within("stuck-a", 2));
  REQUIRE(held.started_within("stuck-b", 1));
  std::this_thread::sleep_for(20ms);
  CHECK(held.started("stuck-a") + held.started("stuck-b") == 3);
  held.let_go();
  queue.join();
  CHECK(held.started("stuck-b") == 2);
}

TEST_CASE("two stuck groups still leave a third group a worker", "[workers]") {
  FairWorkQueue queue(8, FairWorkQueue::Limits{.per_key = 1, .per_group = 4});
  HeldJobs held;
  for (const auto* group : {"controller-a", "controller-b"}) {
    for (int guest = 0; guest < 5; ++guest) {  // one call from each of five guests
      queue.post(FairWorkQueue::Owner{.key = group + std::to_string(guest), .group = group},
                 held.job(group));
    }
  }
  REQUIRE(held.started_within("controller-a", 4));
  REQUIRE(held.started_within("controller-b", 3));
  queue.post(FairWorkQueue::Owner{.key = "c0", .group = "controller-c"}, held.job("controller-c"));
  CHECK(held.started_within("controller-c", 1));  // without the group reserve: all 8 taken
  held.let_go();
  queue.join();
  CHECK(held.started("controller-a") == 5);
  CHECK(held.started("controller-b") == 5);
}
