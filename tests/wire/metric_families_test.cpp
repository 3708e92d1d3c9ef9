// The hub holds each agent family to the type in wire::agent_metric_types(): the table must name
// every family the agent's code writes, with the type it writes.
#include "wire/metric_families.hpp"

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>

#include <catch2/catch.hpp>

namespace {

/// Every `.family("name", "type", ...)` in the agent's sources and what they link.
std::map<std::string, std::string, std::less<>> families_in_code() {
  const std::regex family(R"re(\.family\(\s*"([a-z_:]+)",\s*"([a-z]+)")re");
  std::map<std::string, std::string, std::less<>> found;
  for (const char* room : {"agent", "common", "net"}) {
    for (const auto& entry : std::filesystem::recursive_directory_iterator(
             std::filesystem::path(GARM_EDGE_SOURCE_DIR) / room)) {
      if (entry.path().extension() != ".cpp") {
        continue;
      }
      std::ifstream file(entry.path());
      std::stringstream text;
      text << file.rdbuf();
      const auto source = text.str();
      for (std::sregex_iterator match(source.begin(), source.end(), family), end; match != end;
           ++match) {
        found[(*match)[1].str()] = (*match)[2].str();
      }
    }
  }
  return found;
}

}  // namespace

TEST_CASE("the hub's table of agent families matches what the agent's code writes", "[metrics]") {
  const auto in_code = families_in_code();
  REQUIRE(in_code.size() > 40);  // the scan found the agent's families at all
  CHECK(in_code == garm_edge::wire::agent_metric_types());
}
