// What reaches the hub and its clients from outside: a join token as an operator pastes it, a
// hub's framed answer as a provider reads it, hub.toml, and agents' /metrics as the fleet scrape
// merges them, and an agent's placement view as the hub keeps it. None of them ends the process: a
// token or an answer is taken or refused, a config is read or refused with ConfigError; a framed
// answer never yields more body bytes than it holds; every line the merge writes is exposition
// text, each family's HELP and TYPE once. With GARM_EDGE_FUZZ_MERGE_OUT set to a directory, each
// merge's output is also written there, for run_fuzzers.sh to hand to Prometheus's own parser
// (promtool check metrics).
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <set>
#include <string>
#include <string_view>

#include "common/config_error.hpp"
#include "hub/hub_config.hpp"
#include "hub/placement_views.hpp"
#include "hub/prometheus_merge.hpp"
#include "wire/error.hpp"
#include "wire/join_token.hpp"
#include "wire/metric_families.hpp"
#include "wire/placement_view.hpp"
#include "wire/relay_framing.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace garm_edge;
  if (size == 0) {
    return 0;
  }
  const std::string_view input(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 5) {
    case 0:
      if (const auto token = wire::JoinToken::decode(input);
          token && wire::JoinToken::decode(token->encode())->secret != token->secret) {
        std::abort();  // what was taken must survive its own encoding
      }
      break;
    case 1:
      if (const auto answers = wire::parse_relay_framing(input)) {
        std::size_t bytes = 0;
        for (const auto& answer : *answers) {
          bytes += answer.body.size() + answer.agent.size();
        }
        if (bytes > input.size()) {
          std::abort();
        }
      }
      break;
    case 4: {
      // A view taken is kept, and what the hub answers from it reads as an agent's answer (an
      // exception from that read ends the run: the fuzzer reports it).
      hub::PlacementViews views(std::chrono::seconds(30));
      const auto now = hub::PlacementViews::Clock::now();
      try {
        views.update("a", wire::parse_placement_view(input), now);
      } catch (const wire::WireError&) {
        break;
      }
      for (const auto* controller :
           {"9dcf590a-1192-4a9c-b3e4-e0902974c2c0", "5a3e2b1c-0d9f-4e8a-b7c6-d5e4f3a2b1c0"}) {
        if (const auto answer = views.answer("a", controller, "garm-x", now)) {
          static_cast<void>(wire::parse_placement_answer(*answer));
        }
      }
      break;
    }
    case 3: {
      // Two agents' answers, split at the first NUL.
      const auto split = std::min(input.find('\0'), input.size());
      hub::PrometheusMerge merge("agent", {"garm_edge_agent_up"}, wire::agent_metric_types());
      merge.add_own("# TYPE garm_edge_agent_up gauge\ngarm_edge_agent_up{agent=\"a\"} 1\n");
      merge.add("a", input.substr(0, split));
      merge.add("b\"\\\n", input.substr(std::min(split + 1, input.size())));
      const auto text = merge.str();
      if (const char* out = std::getenv("GARM_EDGE_FUZZ_MERGE_OUT"); out && !text.empty()) {
        std::ofstream(std::string(out) + "/" + std::to_string(std::hash<std::string>{}(text)) +
                      ".prom")
            << text;
      }
      std::set<std::string> typed;
      for (std::size_t at = 0; at < text.size();) {
        const auto end = text.find('\n', at);
        const auto line = std::string_view(text).substr(at, end - at);
        at = end + 1;
        std::string_view name, labels, rest;
        if (line.starts_with("# TYPE ")) {
          if (!typed.insert(std::string(line.substr(7, line.find(' ', 7) - 7))).second) {
            std::abort();  // a family typed twice: Prometheus refuses the scrape
          }
        } else if (!line.starts_with("# HELP ") &&
                   !hub::parse_sample_line(line, name, labels, rest)) {
          std::abort();
        }
      }
      break;
    }
    default:
      try {
        hub::parse_hub_config(input, "hub.toml");
      } catch (const ConfigError&) {
      }
      break;
  }
  return 0;
}
