// Any bytes as the agent's TOML config: a typed config or a ConfigError, never a crash.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "agent/base/config.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const auto config = garm_edge::agent::parse_agent_config(text, "fuzz.toml");
    (void)config;
  } catch (const garm_edge::agent::ConfigError&) {
  }
  return 0;
}
