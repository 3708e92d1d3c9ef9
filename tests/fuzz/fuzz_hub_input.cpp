// What reaches the hub and its clients from outside: a join token as an operator pastes it, a
// hub's framed answer as a provider reads it, and hub.toml. None of them ends the process: a
// token or an answer is taken or refused, a config is read or refused with ConfigError; a
// framed answer never yields more body bytes than it holds.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "common/config_error.hpp"
#include "hub/hub_config.hpp"
#include "wire/join_token.hpp"
#include "wire/relay_framing.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace garm_edge;
  if (size == 0) {
    return 0;
  }
  const std::string_view input(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 3) {
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
    default:
      try {
        hub::parse_hub_config(input, "hub.toml");
      } catch (const ConfigError&) {
      }
      break;
  }
  return 0;
}
