#include "agent/instances/reconcile_loop.hpp"

#include <string>

namespace garm_edge::agent {

PeriodicLoop::PeriodicLoop(std::chrono::milliseconds interval, std::function<void()> pass)
    : interval_(interval), pass_(std::move(pass)), thread_([this] { run(); }) {}

PeriodicLoop::~PeriodicLoop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

std::size_t PeriodicLoop::passes() const {
  std::lock_guard lock(mutex_);
  return passes_;
}

void PeriodicLoop::run() {
  std::unique_lock lock(mutex_);
  while (!wake_.wait_for(lock, interval_, [this] { return stopping_; })) {
    lock.unlock();
    pass_();
    lock.lock();
    ++passes_;
  }
}

ReconcileLoop::ReconcileLoop(InstanceService& service, std::chrono::milliseconds interval,
                             Logger& logger)
    : loop_(interval, [&service, &logger] {
        const auto summary = summarize(service.reconcile());
        if (!summary.empty()) {
          logger.info("reconcile: " + summary);
        }
      }) {}

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
