#include "agent/base/fair_work_queue.hpp"

#include <algorithm>

#include <asio/post.hpp>

namespace garm_edge::agent {

FairWorkQueue::FairWorkQueue(std::size_t workers, std::size_t per_key)
    : per_key_(per_key > 0 ? per_key : std::max<std::size_t>(1, workers / 2)), pool_(workers) {}

void FairWorkQueue::post(const std::string& key, std::function<void()> job) {
  {
    std::lock_guard lock(mutex_);
    auto& queue = queues_[key];
    if (queue.running >= per_key_) {
      queue.waiting.push_back(std::move(job));
      return;
    }
    ++queue.running;
  }
  start(key, std::move(job));
}

void FairWorkQueue::start(const std::string& key, std::function<void()> job) {
  asio::post(pool_, [this, key, job = std::move(job)] {
    try {
      job();
    } catch (...) {
      // a job answers its own failures; one that throws must not take its key's share along
    }
    finished(key);
  });
}

void FairWorkQueue::finished(const std::string& key) {
  std::function<void()> next;
  {
    std::lock_guard lock(mutex_);
    auto& queue = queues_[key];
    if (queue.waiting.empty()) {
      if (--queue.running == 0) {
        queues_.erase(key);
      }
      return;
    }
    next = std::move(queue.waiting.front());
    queue.waiting.pop_front();
  }
  start(key, std::move(next));  // the finished job's slot goes to its key's next one
}

void FairWorkQueue::join() {
  pool_.join();
}

}  // namespace garm_edge::agent
