#include "wire/schemas.hpp"

#include <set>

#include "wire/error.hpp"
#include "wire/pool_shape.hpp"

namespace garm_edge::wire {

std::string extra_specs_json_schema() {
  return R"({"$schema":"http://json-schema.org/draft-07/schema#","title":"garm-edge pool extra specs","type":"object",)"
         R"("properties":{"runner_install_template":{"type":"string","description":"base64 of the install script"},)"
         R"("pre_install_scripts":{"type":"object","additionalProperties":{"type":"string"}},)"
         R"("extra_context":{"type":"object","additionalProperties":{"type":"string"}},)"
         R"("enable_boot_debug":{"type":"boolean"},"disable_updates":{"type":"boolean"},)"
         R"("extra_packages":{"type":"array","items":{"type":"string"}},)"
         R"("caches":{"type":"array","maxItems":8,"items":{"type":"string","pattern":"^[a-z0-9][a-z0-9-]{0,23}$"},"description":"[[caches]] of the agent, by name, this pool's guests also get; only caches of the pool's own controller"},)"
         R"("agent_labels":{"type":"array","items":{"type":"string"},"description":"garm-provider-edge places the pool's instances only on agents with every one of these labels"},)"
         R"("root_disk_gib":{"type":"integer","minimum":1,"maximum":65536,"description":"the root disk's size (at least the flavor's, at most the agent's [extra_specs] max_root_disk_gib); the guest grows its filesystem"},)"
         R"("scratch_disks":{"type":"array","maxItems":4,"items":{"type":"object","additionalProperties":false,"required":["pool","size_gib"],)"
         R"("properties":{"pool":{"type":"string","pattern":"^[a-z0-9][a-z0-9-]{0,23}$","description":"a [[scratch_pools]] name of the agent"},)"
         R"("size_gib":{"type":"integer","minimum":1,"maximum":65536},"mount":{"type":"string","pattern":"^/[A-Za-z0-9._/-]+$","description":"default /mnt/scratch, /mnt/scratch-1, ..."}}},)"
         R"("description":"empty disks, formatted (ext4) and mounted before the runner starts; they go with the guest"},)"
         R"("networks":{"type":"array","maxItems":4,"items":{"type":"string","pattern":"^[a-z0-9][a-z0-9-]{0,23}$"},"description":"further NICs on [[networks]] of the agent, by name"},)"
         R"("nested_virtualization":{"type":"boolean","description":"the guest may run KVM itself; needs a KVM host with nested on and [extra_specs] nested_virtualization = true"},)"
         R"("virt_type":{"enum":["any","kvm","qemu"],"description":"kvm: only hosts with KVM for the image's architecture; qemu: emulated (TCG) even there"},)"
         R"("priority":{"enum":["low","normal","high"],"description":"on a nearly full host low-priority creates leave the room the operator keeps for higher ones, and high-priority ones go to the hosts with most room; capped by the operator per controller, see docs/shares.md"}},)"
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
  parse_pool_shape(extra_specs);  // a pool-shape value that is wrong fails here too
  parse_cache_names(extra_specs);
  parse_priority(extra_specs);
}

}  // namespace garm_edge::wire
