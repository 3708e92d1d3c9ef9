#include "agent/api/api_metrics.hpp"

#include <sstream>

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
  std::ostringstream out;
  out << "# HELP garm_edge_requests_total Control API requests by route, method and status.\n"
         "# TYPE garm_edge_requests_total counter\n";
  for (const auto& [key, count] : requests_) {
    const auto& [route, method, status] = key;
    out << "garm_edge_requests_total{route=\"" << route << "\",method=\"" << method << "\",code=\""
        << status << "\"} " << count << "\n";
  }
  out << "# HELP garm_edge_request_duration_seconds Time to answer control API requests.\n"
         "# TYPE garm_edge_request_duration_seconds summary\n";
  for (const auto& [route, totals] : latency_) {
    out << "garm_edge_request_duration_seconds_sum{route=\"" << route << "\"} " << totals.first
        << "\n"
        << "garm_edge_request_duration_seconds_count{route=\"" << route << "\"} " << totals.second
        << "\n";
  }
  out << "# HELP garm_edge_command_errors_total Failed commands by error code (unavailable and "
         "timeout mean "
         "libvirt trouble).\n# TYPE garm_edge_command_errors_total counter\n";
  for (const auto& [code, count] : errors_) {
    out << "garm_edge_command_errors_total{code=\"" << code << "\"} " << count << "\n";
  }
  out << "# HELP garm_edge_instances Instances on this host by state.\n# TYPE garm_edge_instances "
         "gauge\n";
  for (const auto& [state, count] : instances_by_state) {
    out << "garm_edge_instances{state=\"" << state << "\"} " << count << "\n";
  }
  return out.str();
}

}  // namespace garm_edge::agent
