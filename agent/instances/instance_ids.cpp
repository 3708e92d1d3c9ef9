#include "agent/instances/instance_ids.hpp"

#include "common/text.hpp"
#include "wire/json_fields.hpp"
#include "wire/schemas.hpp"
#include "wire/validate.hpp"

namespace garm_edge::agent {

ControllerId ControllerId::parse(std::string_view text, const std::string& field) {
  wire::validate_uuid(text, field);
  // garm's IDs are lower case, and so is every ID agent.toml names: one controller is one
  // spelling, whatever case a client (or a hub relaying for it) sends.
  return ControllerId(ascii_lower(text));
}

InstanceRef InstanceRef::parse(std::string_view text, const std::string& field) {
  wire::validate_instance_name(text, field);  // every UUID is a valid name too
  return InstanceRef(std::string(text), wire::is_uuid(text));
}

PoolId PoolId::parse(std::string_view text, const std::string& field) {
  wire::validate_pool_id(text, field);
  return PoolId(std::string(text));
}

PoolSpec PoolSpec::parse(std::string_view json_text) {
  const auto pool = wire::parse_json_text(json_text, "pool");
  const wire::ObjectReader in(pool, "");
  PoolSpec spec{.image = in.required_string("image"),
                .flavor = in.required_string("flavor"),
                .os_type = in.enum_value<wire::OsType>("os_type"),
                .arch = in.enum_value<wire::OsArch>("arch"),
                .extra_specs = std::nullopt};
  if (const auto* extra_specs = in.find("extra_specs");
      extra_specs != nullptr && !extra_specs->is_null()) {
    spec.extra_specs = *extra_specs;
  }
  wire::validate_resource_name(spec.image, "image");
  wire::validate_resource_name(spec.flavor, "flavor");
  wire::validate_extra_specs(spec.extra_specs);
  if (spec.extra_specs) {
    wire::validate_extra_spec_keys(*spec.extra_specs);
  }
  return spec;
}

}  // namespace garm_edge::agent
