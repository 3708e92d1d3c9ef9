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
  merge.add("a", std::string(counter) + "garm_edge_x_total{route=\"r\"} 3\n");
  merge.add("b\"q", std::string(counter) + "garm_edge_x_total 4 1700000000000\n");
  CHECK(merge.dropped() == std::map<std::string, std::size_t, std::less<>>{{"a", 0}, {"b\"q", 0}});
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
  CHECK(merge.dropped().at("b") == 13);
  const auto text = merge.str();
  CHECK(text.find("garm_edge_y{agent=\"b\",x=\"ok\\n\"} +Inf\n") != std::string::npos);
  CHECK(text.find("garm_edge_agent_up{agent=\"b\"}") == std::string::npos);
  CHECK(text.find("garm_edge_h_count{agent=\"b\"}") == std::string::npos);
  CHECK(text.find("# TYPE garm_edge_h histogram\n") != std::string::npos);
  CHECK(text.find("agent=\"b\",agent") == std::string::npos);
}

TEST_CASE("merged metrics: what makes Prometheus refuse the whole scrape never passes",
          "[metrics]") {
  garm_edge::hub::PrometheusMerge merge("agent");
  merge.add("evil",
            "# TYPE x gauge\n"
            "x{__name__=\"y\"} 1\n"        // "label name __name__ is not unique"
            "x{a=\"1\",__meta=\"2\"} 1\n"  // Prometheus's own label names
            "x 1 -1\n"                     // a negative timestamp
            "x 1 +5\n"
            "# HELP x bad \\q escape\n"  // an escape the format does not have
            "x{a=\"ok\"} 2 1700000000000\n"
            "x{a=\"space\"} 3 \n"  // a trailing space: written without it
            "# TYPE h histogram\n"
            "h_bucket{le=\"++Inf\"} 1\n"  // a bucket bound no parser reads
            "h_bucket 1\n"                // no bound at all
            "h_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 1\n"
            "h_sum{le=\"x\"} 1\n"  // the parser reads an le on any sample of a histogram
            "# TYPE s summary\n"
            "s{quantile=\"half\"} 1\n"
            "s{quantile=\"0.5\"} 1\n"
            "s_count{quantile=\"x\"} 1\n"
            // A family named for a histogram's group: taken for a second TYPE of h.
            "# TYPE h_count gauge\nh_count{x=\"y\"} 5\n");
  CHECK(merge.dropped().at("evil") == 11);
  CHECK(merge.str() ==
        "# TYPE h histogram\nh_bucket{agent=\"evil\",le=\"+Inf\"} 1\nh_sum{agent=\"evil\"} 1\n"
        "h_count{agent=\"evil\"} 1\n"
        "# TYPE s summary\ns{agent=\"evil\",quantile=\"0.5\"} 1\n"
        "# TYPE x gauge\nx{agent=\"evil\",a=\"ok\"} 2 1700000000000\n"
        "x{agent=\"evil\",a=\"space\"} 3\n");
}

TEST_CASE("merged metrics: a host that types a family otherwise loses its own samples only",
          "[metrics]") {
  const auto honest =
      "# HELP garm_edge_libvirt_up Up.\n# TYPE garm_edge_libvirt_up gauge\n"
      "garm_edge_libvirt_up 1\n"
      "# TYPE garm_edge_startup_seconds histogram\n"
      "garm_edge_startup_seconds_bucket{le=\"+Inf\"} 1\ngarm_edge_startup_seconds_sum 3\n"
      "garm_edge_startup_seconds_count 1\n"
      "# TYPE garm_edge_new_family counter\ngarm_edge_new_family 4\n";
  // TYPE lines alone, from a name that sorts first: they claim nothing.
  const auto claims_only =
      "# TYPE garm_edge_libvirt_up counter\n# TYPE garm_edge_startup_seconds gauge\n"
      "# TYPE garm_edge_new_family gauge\n";
  // Samples under another type: the code's type holds known families, so it is blamed.
  const auto disagrees =
      "# TYPE garm_edge_libvirt_up counter\ngarm_edge_libvirt_up 7\n"
      "# TYPE garm_edge_startup_seconds gauge\ngarm_edge_startup_seconds 9\n";
  const garm_edge::hub::PrometheusMerge::Types known = {{"garm_edge_libvirt_up", "gauge"},
                                                        {"garm_edge_startup_seconds", "histogram"}};
  for (const bool honest_first : {true, false}) {
    garm_edge::hub::PrometheusMerge merge("agent", {}, known);
    if (honest_first) {
      merge.add("honest", honest);
    }
    merge.add("-claims", claims_only);  // a name that sorts first
    merge.add("0aaa", disagrees);
    if (!honest_first) {
      merge.add("honest", honest);
    }
    const auto text = merge.str();
    CHECK_THAT(text, Catch::Contains("# TYPE garm_edge_libvirt_up gauge\n"
                                     "garm_edge_libvirt_up{agent=\"honest\"} 1\n") &&
                         Catch::Contains("garm_edge_startup_seconds_count{agent=\"honest\"} 1\n") &&
                         Catch::Contains("# TYPE garm_edge_new_family counter\n"
                                         "garm_edge_new_family{agent=\"honest\"} 4\n") &&
                         !Catch::Contains("0aaa") && !Catch::Contains("-claims"));
    const auto dropped = merge.dropped();
    CHECK(dropped.at("honest") == 0);
    CHECK(dropped.at("0aaa") == 2);
    CHECK(dropped.at("-claims") == 0);
  }
}
