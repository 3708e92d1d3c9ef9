#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <thread>

#include "agent/base/log.hpp"
#include "agent/instances/instance_service.hpp"

namespace garm_edge::agent {

/// Runs `pass` every `interval` on a thread of its own until destroyed (a pass under way is
/// finished first).
class PeriodicLoop {
 public:
  PeriodicLoop(std::chrono::milliseconds interval, std::function<void()> pass);
  ~PeriodicLoop();
  PeriodicLoop(const PeriodicLoop&) = delete;
  PeriodicLoop& operator=(const PeriodicLoop&) = delete;

  std::size_t passes() const;

 private:
  void run();

  std::chrono::milliseconds interval_;
  std::function<void()> pass_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::size_t passes_ = 0;
  std::thread thread_;
};

/// Runs InstanceService::reconcile every `interval` on a thread of its own, so resources
/// removed behind the agent's back and leftovers of a crash are cleaned up without a restart.
class ReconcileLoop {
 public:
  ReconcileLoop(InstanceService& service, std::chrono::milliseconds interval, Logger& logger);

  std::size_t passes() const { return loop_.passes(); }

 private:
  PeriodicLoop loop_;
};

/// One line for the log, or empty when the pass found nothing to do.
std::string summarize(const ReconcileReport& report);

}  // namespace garm_edge::agent
