#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <tuple>

namespace garm_edge::agent {

/// Counters of the control API for /metrics (Prometheus text format).
class ApiMetrics {
 public:
  void record(std::string_view route, std::string_view method, int status,
              std::chrono::steady_clock::duration elapsed);
  /// One failed command, by its error code (ServiceError::Code's name).
  void record_error(std::string_view code);
  /// Prometheus text of the counters, with the instance gauge from `instances_by_state`.
  std::string render(const std::map<std::string, std::size_t>& instances_by_state) const;

 private:
  mutable std::mutex mutex_;
  std::map<std::tuple<std::string, std::string, int>, std::uint64_t> requests_;
  std::map<std::string, std::pair<double, std::uint64_t>> latency_;  // route: sum seconds, count
  std::map<std::string, std::uint64_t> errors_;
};

}  // namespace garm_edge::agent
