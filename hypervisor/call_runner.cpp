#include "hypervisor/call_runner.hpp"

namespace garm_edge::hypervisor {

CallRunner::CallRunner(std::size_t threads) {
  workers_.reserve(threads);
  queue_->live_workers = threads;
  for (std::size_t i = 0; i < threads; ++i) {
    workers_.emplace_back([queue = queue_] { work(queue); });
  }
}

CallRunner::~CallRunner() {
  constexpr auto kGrace = std::chrono::seconds(2);
  bool all_exited = false;
  {
    std::unique_lock lock(queue_->mutex);
    queue_->stopping = true;
    queue_->jobs.clear();  // nobody waits for them any more
    queue_->wake.notify_all();
    all_exited =
        queue_->exited.wait_for(lock, kGrace, [this] { return queue_->live_workers == 0; });
  }
  for (auto& worker : workers_) {
    if (all_exited) {
      worker.join();
    } else {
      worker.detach();  // it holds the queue; it exits when its call returns
    }
  }
}

void CallRunner::submit(std::function<void()> job) {
  {
    std::lock_guard lock(queue_->mutex);
    queue_->jobs.push_back(std::move(job));
  }
  queue_->wake.notify_one();
}

void CallRunner::work(const std::shared_ptr<Queue>& queue) {
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock lock(queue->mutex);
      queue->wake.wait(lock, [&] { return queue->stopping || !queue->jobs.empty(); });
      if (queue->stopping) {
        --queue->live_workers;
        queue->exited.notify_all();
        return;
      }
      job = std::move(queue->jobs.front());
      queue->jobs.pop_front();
    }
    job();
  }
}

}  // namespace garm_edge::hypervisor
