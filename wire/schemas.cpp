#include "wire/schemas.hpp"

#include <set>

#include "wire/error.hpp"

namespace garm_edge::wire {

std::string extra_specs_json_schema() {
  return R"({"$schema":"http://json-schema.org/draft-07/schema#","title":"garm-edge pool extra specs","type":"object",)"
         R"("properties":{"runner_install_template":{"type":"string","description":"base64 of the install script"},)"
         R"("pre_install_scripts":{"type":"object","additionalProperties":{"type":"string"}},)"
         R"("extra_context":{"type":"object","additionalProperties":{"type":"string"}},)"
         R"("enable_boot_debug":{"type":"boolean"},"disable_updates":{"type":"boolean"},)"
         R"("extra_packages":{"type":"array","items":{"type":"string"}},)"
         R"("caches":{"type":"array","maxItems":8,"items":{"type":"string","pattern":"^[a-z0-9][a-z0-9-]{0,23}$"},"description":"[[caches]] of the agent, by name, this pool's guests also get; only caches of the pool's own controller"},)"
         R"("agent_labels":{"type":"array","items":{"type":"string"},"description":"garm-provider-edge places the pool's instances only on agents with every one of these labels"}},)"
         R"("additionalProperties":false})";
}

void validate_extra_spec_keys(const nlohmann::json& extra_specs) {
  // The schema is the one list of keys: what it publishes is exactly what is accepted.
  static const std::set<std::string> kKnown = [] {
    std::set<std::string> keys;
    const auto schema = nlohmann::json::parse(extra_specs_json_schema());
    for (const auto& [key, property] : schema.at("properties").items()) {
      keys.insert(key);
    }
    return keys;
  }();
  if (!extra_specs.is_object()) {
    return;
  }
  for (const auto& [key, value] : extra_specs.items()) {
    if (kKnown.count(key) == 0) {
      throw WireError("extra_specs." + key, "unknown key (see the extra-specs JSON schema)");
    }
  }
}

}  // namespace garm_edge::wire
