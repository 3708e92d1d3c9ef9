#pragma once

#include <string>

namespace garm_edge::wire {

/// The JSON Schema of a pool's extra_specs as garm-edge understands them (the keys
/// garm-provider-common and garm read, plus the LXD-style package options).
std::string extra_specs_json_schema();

}  // namespace garm_edge::wire
