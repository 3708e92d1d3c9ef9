// Any bytes as CreateInstance's stdin: parsing never crashes, whatever parses survives a
// round trip through garm's serialization unchanged, and rendering the guest's seed from it
// either works or fails with UserDataError.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "userdata/userdata.hpp"
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
  try {
    const auto seed = garm_edge::userdata::render_seed(
        parsed, {.instance_id = "0b6f5b8e-3a52-4c8e-9c1f-2a3b4c5d6e7f",
                 .hostname = parsed.name,
                 .endpoints = {.callback_url = "http://192.168.122.1:8775/api/v1/callbacks",
                               .metadata_url = "http://192.168.122.1:8775/api/v1/metadata"}});
    if (seed.user_data.empty() || seed.meta_data.empty()) {
      std::abort();
    }
  } catch (const garm_edge::userdata::UserDataError&) {
  }
  return 0;
}
