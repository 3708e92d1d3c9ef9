#include "agent/base/prometheus_text.hpp"

#include <catch2/catch.hpp>

using garm_edge::agent::PrometheusText;

TEST_CASE("/metrics text: families, samples and escaped label values", "[metrics]") {
  PrometheusText text;
  text.family("garm_edge_x_total", "counter", "Things counted.")
      .sample("garm_edge_x_total", {{"route", "get"}, {"code", "200"}}, std::uint64_t{3})
      .sample("garm_edge_x_total", {{"route", "a\"b\\c\nd"}}, std::uint64_t{1})
      .sample("garm_edge_seconds", {}, 0.25);
  CHECK(text.str() ==
        "# HELP garm_edge_x_total Things counted.\n"
        "# TYPE garm_edge_x_total counter\n"
        "garm_edge_x_total{route=\"get\",code=\"200\"} 3\n"
        "garm_edge_x_total{route=\"a\\\"b\\\\c\\nd\"} 1\n"
        "garm_edge_seconds 0.25\n");
}
