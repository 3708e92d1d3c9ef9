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
/// a call still queued when its deadline passes never starts.
class CallRunner {
 public:
  explicit CallRunner(std::size_t threads);
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
  void submit(std::function<void()> job);
  void work();

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> queue_;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace garm_edge::hypervisor
