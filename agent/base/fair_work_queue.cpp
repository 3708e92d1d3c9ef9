#include "agent/base/fair_work_queue.hpp"

#include <algorithm>
#include <vector>

#include <asio/post.hpp>

namespace garm_edge::agent {
namespace {

std::size_t half_or(std::size_t chosen, std::size_t workers) {
  return chosen > 0 ? chosen : std::max<std::size_t>(1, workers / 2);
}

void run_quietly(const std::function<void()>& work) noexcept {
  try {
    work();
  } catch (...) {
    // a job answers its own failures; one that throws must not take its key's share along
  }
}

}  // namespace

FairWorkQueue::FairWorkQueue(std::size_t workers, Limits limits)
    : workers_(std::max<std::size_t>(1, workers)),
      limits_{.per_key = half_or(limits.per_key, workers_),
              .per_group = half_or(limits.per_group, workers_),
              .queue_deadline = limits.queue_deadline},
      pool_(workers_) {
  if (limits_.queue_deadline.count() > 0) {
    sweeper_ = std::thread([this] { expire_late_jobs(); });
  }
}

FairWorkQueue::~FairWorkQueue() {
  join();
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_sweeper_.notify_all();
  if (sweeper_.joinable()) {
    sweeper_.join();
  }
}

void FairWorkQueue::post(Owner owner, std::function<void()> job, std::function<void()> expired) {
  {
    std::lock_guard lock(mutex_);
    auto& queue = queues_[owner.key];
    if (!queue.waiting.empty() || !may_start(owner.key, owner.group)) {
      queue.waiting.push_back({.group = std::move(owner.group),
                               .job = std::move(job),
                               .expired = std::move(expired),
                               .since = Clock::now()});
      wake_sweeper_.notify_all();
      return;
    }
    admit(owner.key, owner.group);
  }
  start(owner.key, owner.group, std::move(job));
}

bool FairWorkQueue::may_start(const std::string& key, const std::string& group) {
  const auto running_for_key = queues_[key].running;
  const auto running_for_group = group.empty() ? 0 : running_in(group);
  // Neither a key's nor a group's second and later jobs take the last free worker: whatever
  // the busy ones hold, a key (and a group) with nothing running gets one.
  const bool takes_the_last = running_ + 1 >= workers_;
  if (takes_the_last && (running_for_key > 0 || running_for_group > 0)) {
    return false;
  }
  return running_ < workers_ && running_for_key < limits_.per_key &&
         running_for_group < limits_.per_group;
}

std::size_t FairWorkQueue::running_in(const std::string& group) const {
  const auto found = group_running_.find(group);
  return found == group_running_.end() ? 0 : found->second;
}

void FairWorkQueue::admit(const std::string& key, const std::string& group) {
  ++running_;
  ++queues_[key].running;
  ++group_running_[group];
}

void FairWorkQueue::start(const std::string& key, const std::string& group,
                          std::function<void()> job) {
  asio::post(pool_, [this, key, group, job = std::move(job)] {
    run_quietly(job);
    finished(key, group);
  });
}

void FairWorkQueue::finished(const std::string& key, const std::string& group) {
  std::vector<std::pair<std::string, Waiting>> ready;
  {
    std::lock_guard lock(mutex_);
    --running_;
    if (--group_running_[group] == 0) {
      group_running_.erase(group);
    }
    if (auto& queue = queues_[key]; --queue.running == 0 && queue.waiting.empty()) {
      queues_.erase(key);
    }
    // Usually one job; more when the freed key and group slots let jobs of two keys go.
    std::string next_key;
    Waiting next;
    while (take_next(key, next_key, next)) {
      ready.emplace_back(next_key, std::move(next));
    }
  }
  for (auto& [next_key, next] : ready) {
    start(next_key, next.group, std::move(next.job));
  }
}

bool FairWorkQueue::take_next(const std::string& key, std::string& next_key, Waiting& next) {
  // The group running least first (a controller with many guests gets no more turns than one
  // with few), then round robin over the keys: those after the one that finished first.
  auto chosen = queues_.end();
  std::size_t chosen_group_running = 0;
  auto it = queues_.upper_bound(key);
  for (std::size_t seen = 0; seen < queues_.size(); ++seen, ++it) {
    if (it == queues_.end()) {
      it = queues_.begin();
    }
    const auto& queue = it->second;
    if (queue.waiting.empty() || !may_start(it->first, queue.waiting.front().group)) {
      continue;
    }
    const auto group_running = running_in(queue.waiting.front().group);
    if (chosen == queues_.end() || group_running < chosen_group_running) {
      chosen = it;
      chosen_group_running = group_running;
    }
  }
  if (chosen == queues_.end()) {
    return false;
  }
  next_key = chosen->first;
  next = std::move(chosen->second.waiting.front());
  chosen->second.waiting.pop_front();
  admit(next_key, next.group);
  return true;
}

void FairWorkQueue::expire_late_jobs() {
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    const auto now = Clock::now();
    std::vector<std::function<void()>> answers;
    auto earliest = Clock::time_point::max();
    for (auto it = queues_.begin(); it != queues_.end();) {
      auto& waiting = it->second.waiting;
      while (!waiting.empty() && waiting.front().since + limits_.queue_deadline <= now) {
        answers.push_back(std::move(waiting.front().expired));
        waiting.pop_front();
      }
      if (!waiting.empty()) {
        earliest = std::min(earliest, waiting.front().since + limits_.queue_deadline);
      }
      it = it->second.running == 0 && waiting.empty() ? queues_.erase(it) : std::next(it);
    }
    expired_ += answers.size();
    if (!answers.empty()) {
      lock.unlock();
      for (const auto& answer : answers) {
        if (answer) {
          run_quietly(answer);
        }
      }
      lock.lock();
      continue;
    }
    if (earliest == Clock::time_point::max()) {
      wake_sweeper_.wait(lock);
    } else {
      wake_sweeper_.wait_until(lock, earliest);
    }
  }
}

std::size_t FairWorkQueue::expired() const {
  std::lock_guard lock(mutex_);
  return expired_;
}

void FairWorkQueue::join() {
  pool_.join();
}

}  // namespace garm_edge::agent
