#pragma once

#include <cstdint>
#include <initializer_list>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace garm_edge {

/// Prometheus text exposition format 0.0.4, the one writer of /metrics (the agent's and the
/// hub's). Label values are escaped as the format requires, whatever they hold.
class PrometheusText {
 public:
  using Labels = std::initializer_list<std::pair<std::string_view, std::string_view>>;
  using LabelList = std::vector<std::pair<std::string, std::string>>;

  /// Starts a metric family: its `# HELP` and `# TYPE` lines.
  PrometheusText& family(std::string_view name, std::string_view type, std::string_view help);
  PrometheusText& sample(std::string_view name, Labels labels, std::uint64_t value);
  PrometheusText& sample(std::string_view name, Labels labels, double value);
  PrometheusText& sample(std::string_view name, const LabelList& labels, std::uint64_t value);
  PrometheusText& sample(std::string_view name, const LabelList& labels, double value);

  std::string str() const { return out_.str(); }

 private:
  template <typename Range>
  void begin_sample(std::string_view name, const Range& labels);
  void write(double value);
  std::ostringstream out_;
};

/// One histogram's buckets, sum and count (not thread-safe: its owner locks).
class Histogram {
 public:
  /// `bounds`: the buckets' upper bounds, ascending; +Inf is added.
  explicit Histogram(std::vector<double> bounds);
  void observe(double value);
  std::uint64_t count() const { return count_; }
  /// Its `name_bucket`, `name_sum` and `name_count` samples with `labels` (the family is the
  /// caller's to start).
  void render(PrometheusText& text, std::string_view name,
              const PrometheusText::LabelList& labels) const;

 private:
  std::vector<double> bounds_;
  std::vector<std::uint64_t> counts_;  // per bucket, not cumulative
  double sum_ = 0;
  std::uint64_t count_ = 0;
};

}  // namespace garm_edge
