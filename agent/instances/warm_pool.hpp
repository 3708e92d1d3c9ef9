#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <map>
#include <mutex>
#include <string>

#include "agent/base/clock.hpp"
#include "agent/base/log.hpp"
#include "agent/instances/instance_service.hpp"

namespace garm_edge::agent {

/// Keeps `[[warm]] count` guests of each image and flavor booted ahead of demand
/// (docs/warm-guests.md). Each pass retires warm guests whose image or flavor settings changed
/// (or beyond the count), destroys those not ready within their deadline (wasted), and starts
/// one guest for each entry that is short, if the host has room for it and for one more of
/// its flavor: a warm guest never takes the slot a cold create needs.
class WarmPool {
 public:
  WarmPool(InstanceService& service, const Clock& clock, Logger& log);

  struct Pass {
    std::size_t started = 0;
    std::size_t retired = 0;
    std::size_t expired = 0;
    std::size_t failures = 0;
  };
  /// Never throws: failures are counted and logged.
  Pass pass();

  /// Warm guests by state (warming, ready) as of the last pass, and counters since start.
  std::string render_metrics() const;

 private:
  void retire(const InstanceRecord& record, const std::string& why, Pass& pass);
  bool has_room_for_two(const FlavorConfig& flavor);

  InstanceService& service_;
  const Clock& clock_;
  Logger& log_;
  mutable std::mutex mutex_;
  std::map<std::string, std::size_t> by_state_;  // of the last pass
  std::atomic<std::size_t> started_{0};
  std::atomic<std::size_t> wasted_{0};
  std::atomic<std::size_t> retired_{0};
  /// After a failed start, an entry waits a while before the next try.
  std::map<std::string, std::chrono::system_clock::time_point> backoff_until_;
};

}  // namespace garm_edge::agent
