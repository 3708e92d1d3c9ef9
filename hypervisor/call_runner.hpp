#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "hypervisor/hypervisor.hpp"

namespace garm_edge::hypervisor {

/// Runs blocking calls on a small pool of threads so the caller can give up after a deadline.
/// libvirt's C API has no per-call timeout; a call that hangs (a stuck daemon, a wedged
/// storage backend) keeps its worker, but the caller gets HypervisorError(timeout) in time and
/// a call still queued when its deadline passes never starts. Jobs must own what they touch.
class CallRunner {
 public:
  explicit CallRunner(std::size_t threads);
  /// Waits briefly for the workers; any still stuck in a call are left to finish on their own
  /// rather than hang the caller (startup failing on a dead URI, or shutdown).
  ~CallRunner();
  CallRunner(const CallRunner&) = delete;
  CallRunner& operator=(const CallRunner&) = delete;

  template <class Fn>
  std::invoke_result_t<Fn> run(std::chrono::milliseconds deadline, const std::string& what, Fn fn) {
    using Result = std::invoke_result_t<Fn>;
    auto task = std::make_shared<std::packaged_task<Result()>>(std::move(fn));
    auto abandoned = std::make_shared<std::atomic<bool>>(false);
    auto future = task->get_future();
    submit([task, abandoned] {
      if (!abandoned->load()) {
        (*task)();
      }
    });
    if (future.wait_for(deadline) != std::future_status::ready) {
      abandoned->store(true);
      throw HypervisorError(
          HypervisorError::Kind::timeout,
          what + " did not finish within " + std::to_string(deadline.count()) + " ms");
    }
    return future.get();
  }

 private:
  struct Queue {
    std::mutex mutex;
    std::condition_variable wake;
    std::condition_variable exited;
    std::deque<std::function<void()>> jobs;
    std::size_t live_workers = 0;
    bool stopping = false;
  };

  void submit(std::function<void()> job);
  static void work(const std::shared_ptr<Queue>& queue);

  std::shared_ptr<Queue> queue_ = std::make_shared<Queue>();
  std::vector<std::thread> workers_;
};

}  // namespace garm_edge::hypervisor
