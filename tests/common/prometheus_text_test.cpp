#include "common/prometheus_text.hpp"

#include <catch2/catch.hpp>

#include "hub/prometheus_merge.hpp"

using garm_edge::PrometheusText;

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

TEST_CASE("a histogram renders cumulative buckets, +Inf, sum and count", "[metrics]") {
  garm_edge::Histogram histogram({1, 5, 0.5});
  for (const double value : {0.2, 0.5, 3.0, 7.0}) {
    histogram.observe(value);
  }
  PrometheusText text;
  histogram.render(text, "garm_edge_s", {{"pool", "p"}});
  CHECK(text.str() ==
        "garm_edge_s_bucket{pool=\"p\",le=\"0.5\"} 2\n"
        "garm_edge_s_bucket{pool=\"p\",le=\"1\"} 2\n"
        "garm_edge_s_bucket{pool=\"p\",le=\"5\"} 3\n"
        "garm_edge_s_bucket{pool=\"p\",le=\"+Inf\"} 4\n"
        "garm_edge_s_sum{pool=\"p\"} 10.7\n"
        "garm_edge_s_count{pool=\"p\"} 4\n");
}

TEST_CASE("doubles keep every digit: a byte count is exact", "[metrics]") {
  PrometheusText text;
  text.sample("garm_edge_bytes", {}, 68719476736.0);
  CHECK(text.str() == "garm_edge_bytes 68719476736\n");
}

TEST_CASE("merged metrics: each source's samples under its label, one HELP and TYPE per family",
          "[metrics]") {
  garm_edge::hub::PrometheusMerge merge("agent");
  merge.add_own(
      "# HELP garm_edge_agent_up Whether it answered.\n# TYPE garm_edge_agent_up gauge\n"
      "garm_edge_agent_up{agent=\"a\"} 1\ngarm_edge_agent_up{agent=\"b\"} 0\n");
  const auto counter = "# HELP garm_edge_x_total X.\n# TYPE garm_edge_x_total counter\n";
  CHECK(merge.add("a", std::string(counter) + "garm_edge_x_total{route=\"r\"} 3\n") == 0);
  CHECK(merge.add("b\"q", std::string(counter) + "garm_edge_x_total 4 1700000000000\n") == 0);
  CHECK(merge.str() ==
        "# HELP garm_edge_agent_up Whether it answered.\n# TYPE garm_edge_agent_up gauge\n"
        "garm_edge_agent_up{agent=\"a\"} 1\ngarm_edge_agent_up{agent=\"b\"} 0\n"
        "# HELP garm_edge_x_total X.\n# TYPE garm_edge_x_total counter\n"
        "garm_edge_x_total{agent=\"a\",route=\"r\"} 3\n"
        "garm_edge_x_total{agent=\"b\\\"q\"} 4 1700000000000\n");
}

TEST_CASE("merged metrics: a source cannot break the whole or pass for another", "[metrics]") {
  garm_edge::hub::PrometheusMerge merge("agent");
  merge.add_own("# TYPE garm_edge_agent_up gauge\ngarm_edge_agent_up{agent=\"a\"} 1\n");
  merge.add("a",
            "# TYPE garm_edge_h histogram\ngarm_edge_h_bucket{le=\"+Inf\"} 1\n"
            "garm_edge_h_sum 2\ngarm_edge_h_count 1\n");
  const auto dropped =
      merge.add("b",
                "# TYPE garm_edge_agent_up gauge\ngarm_edge_agent_up 1\n"  // the hub's own family
                "# TYPE garm_edge_h counter\ngarm_edge_h_count 9\n"        // another TYPE than a's
                "# TYPE garm_edge_y gauge\n"
                "garm_edge_y{agent=\"a\"} 1\n"  // passing for a
                "garm_edge_y{x=\"unterminated} 1\n"
                "garm_edge_y{x=\"a\"}1\n"
                "garm_edge_y 1 2 3\n"
                "garm_edge_y one\n"
                "garm_edge_untyped 1\n"
                "# TYPE bad name gauge\n"
                // Each of these would make Prometheus refuse the whole scrape.
                "garm_edge_y{x=\"1\",x=\"2\"} 1\n"
                "garm_edge_y{x=\"\xff\"} 1\n"
                "garm_edge_y 1e400\n"
                "garm_edge_y 1 99999999999999999999\n"
                "garm_edge_y{x=\"ok\\n\"} +Inf\n");
  CHECK(dropped == 13);
  const auto text = merge.str();
  CHECK(text.find("garm_edge_y{agent=\"b\",x=\"ok\\n\"} +Inf\n") != std::string::npos);
  CHECK(text.find("garm_edge_agent_up{agent=\"b\"}") == std::string::npos);
  CHECK(text.find("garm_edge_h_count{agent=\"b\"}") == std::string::npos);
  CHECK(text.find("# TYPE garm_edge_h histogram\n") != std::string::npos);
  CHECK(text.find("agent=\"b\",agent") == std::string::npos);
}
