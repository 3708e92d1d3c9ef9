#include "wire/schemas.hpp"

namespace garm_edge::wire {

std::string extra_specs_json_schema() {
  return R"({"$schema":"http://json-schema.org/draft-07/schema#","title":"garm-edge pool extra specs","type":"object",)"
         R"("properties":{"runner_install_template":{"type":"string","description":"base64 of the install script"},)"
         R"("pre_install_scripts":{"type":"object","additionalProperties":{"type":"string"}},)"
         R"("extra_context":{"type":"object","additionalProperties":{"type":"string"}},)"
         R"("enable_boot_debug":{"type":"boolean"},"disable_updates":{"type":"boolean"},)"
         R"("extra_packages":{"type":"array","items":{"type":"string"}}},"additionalProperties":false})";
}

}  // namespace garm_edge::wire
