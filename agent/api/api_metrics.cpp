#include "agent/api/api_metrics.hpp"

#include "common/prometheus_text.hpp"

namespace garm_edge::agent {

void ApiMetrics::record(std::string_view route, std::string_view method, int status,
                        std::chrono::steady_clock::duration elapsed) {
  std::lock_guard lock(mutex_);
  ++requests_[{std::string(route), std::string(method), status}];
  auto& [sum, count] = latency_[std::string(route)];
  sum += std::chrono::duration<double>(elapsed).count();
  ++count;
}

void ApiMetrics::record_error(std::string_view code) {
  std::lock_guard lock(mutex_);
  ++errors_[std::string(code)];
}

std::string ApiMetrics::render(const std::map<std::string, std::size_t>& instances_by_state) const {
  std::lock_guard lock(mutex_);
  PrometheusText text;
  text.family("garm_edge_requests_total", "counter",
              "Control API requests by route, method and status.");
  for (const auto& [key, count] : requests_) {
    const auto& [route, method, status] = key;
    const auto code = std::to_string(status);
    text.sample("garm_edge_requests_total", {{"route", route}, {"method", method}, {"code", code}},
                count);
  }
  text.family("garm_edge_request_duration_seconds", "summary",
              "Time to answer control API requests.");
  for (const auto& [route, totals] : latency_) {
    text.sample("garm_edge_request_duration_seconds_sum", {{"route", route}}, totals.first);
    text.sample("garm_edge_request_duration_seconds_count", {{"route", route}}, totals.second);
  }
  text.family(
      "garm_edge_command_errors_total", "counter",
      "Failed commands by error code (unavailable: libvirt unreachable or no guest address free; "
      "timeout: a libvirt call past its deadline).");
  for (const auto& [code, count] : errors_) {
    text.sample("garm_edge_command_errors_total", {{"code", code}}, count);
  }
  text.family("garm_edge_instances", "gauge", "Instances on this host by state.");
  for (const auto& [state, count] : instances_by_state) {
    text.sample("garm_edge_instances", {{"state", state}}, std::uint64_t{count});
  }
  return text.str();
}

}  // namespace garm_edge::agent
