// Any bytes as CreateInstance's stdin: parsing never crashes, and whatever parses survives a
// round trip through garm's serialization unchanged.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "wire/bootstrap.hpp"
#include "wire/error.hpp"
#include "wire/validate.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace garm_edge::wire;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  BootstrapInstance parsed;
  try {
    parsed = parse_bootstrap_instance(text);
  } catch (const WireError&) {
    return 0;
  }
  try {
    validate_bootstrap(parsed);
  } catch (const WireError&) {
  }
  if (parse_bootstrap_instance(to_json(parsed).dump()) != parsed) {
    std::abort();
  }
  return 0;
}
