#pragma once

#include <cstdint>
#include <initializer_list>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>

namespace garm_edge::agent {

/// Prometheus text exposition format 0.0.4, the one writer of /metrics. Label values are
/// escaped as the format requires, whatever they hold.
class PrometheusText {
 public:
  using Labels = std::initializer_list<std::pair<std::string_view, std::string_view>>;

  /// Starts a metric family: its `# HELP` and `# TYPE` lines.
  PrometheusText& family(std::string_view name, std::string_view type, std::string_view help);
  PrometheusText& sample(std::string_view name, Labels labels, std::uint64_t value);
  PrometheusText& sample(std::string_view name, Labels labels, double value);

  std::string str() const { return out_.str(); }

 private:
  void begin_sample(std::string_view name, Labels labels);
  std::ostringstream out_;
};

}  // namespace garm_edge::agent
