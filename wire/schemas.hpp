#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace garm_edge::wire {

/// The JSON Schema of a pool's extra_specs as garm-edge understands them (the keys
/// garm-provider-common and garm read, plus the LXD-style package options).
std::string extra_specs_json_schema();

/// Refuses extra_specs keys the schema does not list (WireError naming the key): a typo in a
/// pool's extra specs should fail validation, not be ignored silently. The pool-shape keys'
/// values are checked too (parse_pool_shape).
void validate_extra_spec_keys(const nlohmann::json& extra_specs);

}  // namespace garm_edge::wire
