#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <thread>

#include "agent/base/log.hpp"
#include "agent/instances/instance_service.hpp"

namespace garm_edge::agent {

/// Runs InstanceService::reconcile every `interval` on a thread of its own, so resources
/// removed behind the agent's back and leftovers of a crash are cleaned up without a restart.
class ReconcileLoop {
 public:
  ReconcileLoop(InstanceService& service, std::chrono::milliseconds interval, Logger& logger);
  ~ReconcileLoop();
  ReconcileLoop(const ReconcileLoop&) = delete;
  ReconcileLoop& operator=(const ReconcileLoop&) = delete;

  std::size_t passes() const;

 private:
  void run();

  InstanceService& service_;
  std::chrono::milliseconds interval_;
  Logger& log_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::size_t passes_ = 0;
  std::thread thread_;
};

/// One line for the log, or empty when the pass found nothing to do.
std::string summarize(const ReconcileReport& report);

}  // namespace garm_edge::agent
