#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "agent/base/clock.hpp"
#include "agent/base/log.hpp"
#include "agent/instances/instance_service.hpp"

namespace garm_edge::agent {

/// Keeps `[[warm]] count` guests of each controller, image and flavor booted ahead of demand
/// (docs/warm-guests.md). Each pass retires warm guests whose entry's controller or image or
/// flavor settings changed (or beyond the count, or whose domain stopped), destroys those not
/// ready within their deadline (wasted), and starts one guest for each entry that is short, if
/// the host has room for it and for one more of its flavor (checked under the capacity ledger):
/// a warm guest never takes the slot a cold create needs.
class WarmPool {
 public:
  WarmPool(InstanceService& service, const Clock& clock, Logger& log);

  struct Pass {
    std::size_t started = 0;
    std::size_t retired = 0;
    std::size_t expired = 0;
    std::size_t saved = 0;
    std::size_t failures = 0;
  };
  /// Never throws: failures are counted and logged.
  Pass pass();

  /// Warm guests by state (warming, ready) as of the last pass, and counters since start.
  std::string render_metrics() const;

 private:
  /// True when the warm guest was removed (not when it was bound meanwhile).
  bool retire(const InstanceRecord& record, const std::string& why, Pass& pass);
  bool runs(const InstanceRecord& record);
  /// One entry's guests this pass keeps: warming, ready (by domain name, oldest first), saved.
  struct Kept {
    std::size_t warming = 0;
    std::vector<std::string> ready;
    std::size_t saved = 0;
    std::uint64_t saved_mib = 0;  // their flavors' memory: what their memory files hold
    std::size_t running() const { return warming + ready.size(); }
    std::size_t total() const { return running() + saved; }
    void add(const InstanceRecord& guest, std::uint64_t memory_mib);
  };
  std::uint64_t flavor_memory_mib(const WarmConfig& warm) const;
  /// How many saved guests the entry keeps: its `saved`, within [capacity] max_saved_gib
  /// (`saved_mib`: every entry's saved memory).
  std::size_t saved_target(const WarmConfig& warm, const Kept& ours, std::uint64_t saved_mib) const;
  /// Saves the oldest ready guests beyond the entry's running `count`, up to its saved target.
  void save_beyond_count(const WarmConfig& warm, Kept& ours, std::uint64_t& saved_mib, Pass& pass,
                         std::map<std::string, std::size_t>& states);
  /// Starts one guest of `warm`; a host without room (or draining) is no failure.
  void start_one(const std::string& spec, const WarmConfig& warm, Pass& pass,
                 std::map<std::string, std::size_t>& states);

  InstanceService& service_;
  const Clock& clock_;
  Logger& log_;
  mutable std::mutex mutex_;
  std::map<std::string, std::size_t> by_state_;  // of the last pass
  std::atomic<std::size_t> started_{0};
  std::atomic<std::size_t> wasted_{0};
  std::atomic<std::size_t> retired_{0};
  std::atomic<std::size_t> saved_{0};
  /// After a failed start, an entry waits a while before the next try.
  std::map<std::string, std::chrono::system_clock::time_point> backoff_until_;
};

}  // namespace garm_edge::agent
