#include "common/prometheus_text.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace garm_edge {
namespace {

std::string escaped_label_value(std::string_view value) {
  std::string out;
  for (const char c : value) {
    if (c == '\\' || c == '"') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

/// The shortest of 15 or 17 significant digits that reads back as the same double: byte counts
/// stay exact. (Not std::to_chars: its tables would add a tenth to the agent's binary.)
std::string shortest(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.15g", value);
  if (std::strtod(text, nullptr) != value) {
    std::snprintf(text, sizeof text, "%.17g", value);
  }
  return text;
}

}  // namespace

PrometheusText& PrometheusText::family(std::string_view name, std::string_view type,
                                       std::string_view help) {
  out_ << "# HELP " << name << ' ' << help << "\n# TYPE " << name << ' ' << type << '\n';
  return *this;
}

PrometheusText& PrometheusText::sample(std::string_view name, Labels labels, std::uint64_t value) {
  begin_sample(name, labels);
  out_ << value << '\n';
  return *this;
}

PrometheusText& PrometheusText::sample(std::string_view name, Labels labels, double value) {
  begin_sample(name, labels);
  write(value);
  return *this;
}

PrometheusText& PrometheusText::sample(std::string_view name, const LabelList& labels,
                                       std::uint64_t value) {
  begin_sample(name, labels);
  out_ << value << '\n';
  return *this;
}

PrometheusText& PrometheusText::sample(std::string_view name, const LabelList& labels,
                                       double value) {
  begin_sample(name, labels);
  write(value);
  return *this;
}

void PrometheusText::write(double value) {
  if (std::isnan(value)) {
    out_ << "NaN\n";
  } else if (std::isinf(value)) {
    out_ << (value > 0 ? "+Inf\n" : "-Inf\n");
  } else {
    out_ << shortest(value) << '\n';
  }
}

template <typename Range>
void PrometheusText::begin_sample(std::string_view name, const Range& labels) {
  out_ << name;
  if (labels.size() != 0) {
    out_ << '{';
    const char* separator = "";
    for (const auto& [label, value] : labels) {
      out_ << separator << label << "=\"" << escaped_label_value(value) << '"';
      separator = ",";
    }
    out_ << '}';
  }
  out_ << ' ';
}

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {
  std::sort(bounds_.begin(), bounds_.end());
}

void Histogram::observe(double value) {
  const auto bucket = std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin();
  ++counts_[static_cast<std::size_t>(bucket)];
  sum_ += value;
  ++count_;
}

void Histogram::render(PrometheusText& text, std::string_view name,
                       const PrometheusText::LabelList& labels) const {
  const auto bucket_name = std::string(name) + "_bucket";
  auto with_le = labels;
  with_le.emplace_back("le", "");
  std::uint64_t cumulative = 0;
  for (std::size_t i = 0; i <= bounds_.size(); ++i) {
    cumulative += counts_[i];
    if (i < bounds_.size()) {
      with_le.back().second = shortest(bounds_[i]);
    } else {
      with_le.back().second = "+Inf";
    }
    text.sample(bucket_name, with_le, cumulative);
  }
  text.sample(std::string(name) + "_sum", labels, sum_);
  text.sample(std::string(name) + "_count", labels, count_);
}

}  // namespace garm_edge
