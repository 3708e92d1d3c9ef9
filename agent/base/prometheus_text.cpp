#include "agent/base/prometheus_text.hpp"

namespace garm_edge::agent {
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
  out_ << value << '\n';
  return *this;
}

void PrometheusText::begin_sample(std::string_view name, Labels labels) {
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

}  // namespace garm_edge::agent
