#include "agent/instances/reconcile_loop.hpp"

#include <string>

namespace garm_edge::agent {

ReconcileLoop::ReconcileLoop(InstanceService& service, std::chrono::milliseconds interval,
                             Logger& logger)
    : service_(service), interval_(interval), log_(logger), thread_([this] { run(); }) {}

ReconcileLoop::~ReconcileLoop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

std::size_t ReconcileLoop::passes() const {
  std::lock_guard lock(mutex_);
  return passes_;
}

void ReconcileLoop::run() {
  std::unique_lock lock(mutex_);
  while (!wake_.wait_for(lock, interval_, [this] { return stopping_; })) {
    lock.unlock();
    const auto summary = summarize(service_.reconcile());
    if (!summary.empty()) {
      log_.info("reconcile: " + summary);
    }
    lock.lock();
    ++passes_;
  }
}

std::string summarize(const ReconcileReport& report) {
  std::string text;
  const auto add = [&text](std::size_t count, const char* what) {
    if (count > 0) {
      text += (text.empty() ? "" : ", ") + std::to_string(count) + " " + what;
    }
  };
  add(report.rolled_back_creates, "interrupted creates rolled back");
  add(report.finished_deletes, "interrupted deletes finished");
  add(report.vanished_domains, "records of vanished domains removed");
  add(report.orphan_domains, "untracked tagged domains removed");
  add(report.orphan_volumes, "unused overlay volumes removed");
  add(report.orphan_reservations, "unheld address reservations released");
  add(report.other_state, "domains from another state directory left alone");
  add(report.busy, "instances busy, left for the next pass");
  add(report.failures, "failures");
  return text;
}

}  // namespace garm_edge::agent
