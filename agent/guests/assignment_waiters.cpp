#include "agent/guests/assignment_waiters.hpp"

#include <algorithm>
#include <charconv>
#include <vector>

namespace garm_edge::agent {

net::HttpResponse no_assignment_yet() {
  return {.status = 204, .content_type = "text/plain; charset=utf-8", .body = "", .headers = {}};
}

AssignmentWaiters::AssignmentWaiters(Answer answer, Timing timing)
    : answer_(std::move(answer)), timing_(timing), thread_([this] { run(); }) {}

void AssignmentWaiters::park(const std::string& domain, std::chrono::milliseconds wait,
                             Respond respond) {
  Respond replaced;
  {
    std::lock_guard lock(mutex_);
    if (stopping_) {
      return;
    }
    auto& waiter = waiters_[domain];
    replaced = std::move(waiter.respond);
    const auto now = Clock::now();
    // Checked at once: the guest may have been bound since it last asked.
    waiter = {.id = ++next_id_,
              .respond = std::move(respond),
              .wait = wait,
              .deadline = now + wait,
              .next_check = now,
              .woken_at = now};
  }
  changed_.notify_one();
  if (replaced) {
    replaced(no_assignment_yet());
  }
}

void AssignmentWaiters::wake(const std::string& domain) {
  {
    std::lock_guard lock(mutex_);
    const auto it = waiters_.find(domain);
    if (it == waiters_.end()) {
      return;
    }
    it->second.next_check = it->second.woken_at = Clock::now();
  }
  changed_.notify_one();
}

void AssignmentWaiters::stop() {
  std::map<std::string, Waiter> dropped;
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    dropped.swap(waiters_);
  }
  changed_.notify_one();
  if (thread_.joinable()) {
    thread_.join();
  }
}

std::size_t AssignmentWaiters::waiting() const {
  std::lock_guard lock(mutex_);
  return waiters_.size();
}

void AssignmentWaiters::run() {
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    const auto due = due_locked(Clock::now());
    if (due.empty()) {
      changed_.wait_until(lock, next_wakeup_locked());
      continue;
    }
    lock.unlock();
    for (const auto& each : due) {
      check(each);
    }
    lock.lock();
  }
}

std::vector<AssignmentWaiters::Due> AssignmentWaiters::due_locked(Clock::time_point now) {
  std::vector<Due> due;
  for (auto& [domain, waiter] : waiters_) {
    const bool expired = waiter.deadline <= now;
    if (!expired && waiter.next_check > now) {
      continue;
    }
    due.push_back({.domain = domain, .id = waiter.id, .expired = expired});
    // When the answer is not there yet: a guest that waits on (saved) waits as long again.
    if (expired) {
      waiter.deadline = now + waiter.wait;
    }
    waiter.next_check =
        now + (now - waiter.woken_at < timing_.woken_for ? timing_.after_wake : timing_.sweep);
  }
  return due;
}

AssignmentWaiters::Clock::time_point AssignmentWaiters::next_wakeup_locked() const {
  auto next = Clock::now() + std::chrono::hours(1);
  for (const auto& [domain, waiter] : waiters_) {
    next = std::min({next, waiter.deadline, waiter.next_check});
  }
  return next;
}

void AssignmentWaiters::check(const Due& due) {
  std::optional<net::HttpResponse> answer;
  try {
    answer = answer_(due.domain, due.expired);
  } catch (...) {
    answer = net::HttpResponse{.status = 503,
                               .content_type = "text/plain; charset=utf-8",
                               .body = "the agent could not read this guest's state\n",
                               .headers = {{"Retry-After", "5"}}};
  }
  if (!answer) {
    return;
  }
  Respond respond;
  {
    std::lock_guard lock(mutex_);
    const auto it = waiters_.find(due.domain);
    if (it == waiters_.end() || it->second.id != due.id) {
      return;  // answered meanwhile (a newer poll replaced it)
    }
    respond = std::move(it->second.respond);
    waiters_.erase(it);
  }
  respond(std::move(*answer));
}

std::optional<std::chrono::milliseconds> requested_wait(const net::HttpRequest& request,
                                                        int max_seconds) {
  const auto value = net::raw_query_value(request, "wait");
  if (!value) {
    return std::nullopt;
  }
  int seconds = 0;
  const auto end = value->data() + value->size();
  const auto [stop, error] = std::from_chars(value->data(), end, seconds);
  if (value->empty() || error != std::errc() || stop != end || seconds < 1) {
    return std::nullopt;
  }
  return std::chrono::seconds(std::min(seconds, max_seconds));
}

}  // namespace garm_edge::agent
