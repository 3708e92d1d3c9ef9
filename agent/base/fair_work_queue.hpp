#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include <asio/thread_pool.hpp>

namespace garm_edge::agent {

/// Worker threads that no key (a client certificate, a guest) and no group of keys (a
/// controller's guests) can occupy alone: a key has at most `per_key` jobs running and a group
/// at most `per_group`; further jobs wait in their key's own queue, in order, holding no
/// worker, while other keys' jobs take the free workers (the group running least first, then
/// round robin over the keys). Neither a key's nor a group's second and later jobs take the
/// last free worker, so however many are stuck, a key or group with nothing running is served
/// at once (while fewer keys than workers are stuck); the price is one idle worker while every
/// key with work has one running. One
/// controller's commands stuck on libvirt, or one controller's guests calling a garm that
/// answers slowly, leave the others workers. With a queue deadline a job that waited that
/// long for a worker is not run: its `expired` answer runs instead, at the deadline.
class FairWorkQueue {
 public:
  struct Limits {
    std::size_t per_key = 0;                      // 0: half the workers (at least one)
    std::size_t per_group = 0;                    // 0: half the workers (at least one)
    std::chrono::milliseconds queue_deadline{0};  // 0: a job waits as long as it takes
  };
  struct Owner {
    std::string key;
    std::string group;  // empty: in no group, limited per key only
  };

  FairWorkQueue(std::size_t workers, Limits limits);
  /// Keys without groups, jobs without a deadline.
  explicit FairWorkQueue(std::size_t workers, std::size_t per_key = 0)
      : FairWorkQueue(workers, Limits{.per_key = per_key}) {}
  ~FairWorkQueue();
  FairWorkQueue(const FairWorkQueue&) = delete;
  FairWorkQueue& operator=(const FairWorkQueue&) = delete;

  void post(const std::string& key, std::function<void()> job) {
    post(Owner{.key = key, .group = ""}, std::move(job));
  }
  /// `expired` (never throwing, quick) instead of `job` when the job waited past the deadline.
  void post(Owner owner, std::function<void()> job, std::function<void()> expired = {});
  /// Waits for every job posted so far, queued ones included.
  void join();
  std::size_t per_key() const { return limits_.per_key; }
  /// Jobs answered by `expired` so far.
  std::size_t expired() const;

 private:
  using Clock = std::chrono::steady_clock;
  struct Waiting {
    std::string group;
    std::function<void()> job;
    std::function<void()> expired;
    Clock::time_point since;
  };
  struct Queue {
    std::size_t running = 0;
    std::deque<Waiting> waiting;
  };

  bool may_start(const std::string& key, const std::string& group);
  std::size_t running_in(const std::string& group) const;
  void admit(const std::string& key, const std::string& group);
  void start(const std::string& key, const std::string& group, std::function<void()> job);
  void finished(const std::string& key, const std::string& group);
  /// Under the lock: the next waiting job that may start, after `key` in round-robin order.
  bool take_next(const std::string& key, std::string& next_key, Waiting& next);
  void expire_late_jobs();

  std::size_t workers_;
  Limits limits_;
  asio::thread_pool pool_;
  mutable std::mutex mutex_;
  std::condition_variable wake_sweeper_;
  std::size_t running_ = 0;
  std::size_t expired_ = 0;
  bool stopping_ = false;
  std::map<std::string, Queue> queues_;
  std::map<std::string, std::size_t> group_running_;
  std::thread sweeper_;  // only with a queue deadline
};

}  // namespace garm_edge::agent
