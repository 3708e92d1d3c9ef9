#include "wire/provider_instance.hpp"

#include "wire/base64.hpp"
#include "wire/json_fields.hpp"

namespace garm_edge::wire {
namespace {

using ordered_json = nlohmann::ordered_json;

std::vector<Address> addresses_from_json(const ObjectReader& in) {
  const auto* value = in.find("addresses");
  if (value == nullptr || value->is_null()) {
    return {};
  }
  if (!value->is_array()) {
    throw WireError(in.path_of("addresses"),
                    std::string("expected an array, got ") + value->type_name());
  }
  std::vector<Address> addresses;
  for (std::size_t i = 0; i < value->size(); ++i) {
    const ObjectReader item((*value)[i], in.path_of("addresses") + "[" + std::to_string(i) + "]");
    addresses.push_back(Address{
        .address = item.string_or_empty("address"),
        .type = item.enum_value<AddressType>("type").value_or(AddressType::private_address),
    });
  }
  return addresses;
}

}  // namespace

ordered_json to_json(const ProviderInstance& instance) {
  ordered_json out = ordered_json::object();
  const auto put = [&out](const char* key, const std::string& value) {
    if (!value.empty()) {
      out[key] = value;
    }
  };
  put("provider_id", instance.provider_id);
  put("name", instance.name);
  if (instance.os_type) {
    out["os_type"] = to_string(*instance.os_type);
  }
  put("os_name", instance.os_name);
  put("os_version", instance.os_version);
  if (instance.os_arch) {
    out["os_arch"] = to_string(*instance.os_arch);
  }
  if (!instance.addresses.empty()) {
    ordered_json addresses = ordered_json::array();
    for (const auto& address : instance.addresses) {
      addresses.push_back({{"address", address.address}, {"type", to_string(address.type)}});
    }
    out["addresses"] = addresses;
  }
  if (instance.status) {
    out["status"] = to_string(*instance.status);
  }
  if (!instance.provider_fault.empty()) {
    out["provider_fault"] = base64_encode(instance.provider_fault);
  }
  return out;
}

ordered_json to_json(const std::vector<ProviderInstance>& instances) {
  ordered_json out = ordered_json::array();
  for (const auto& instance : instances) {
    out.push_back(to_json(instance));
  }
  return out;
}

ProviderInstance provider_instance_from_json(const nlohmann::json& value, const std::string& path) {
  const ObjectReader in(value, path);
  ProviderInstance instance;
  instance.provider_id = in.string_or_empty("provider_id");
  instance.name = in.string_or_empty("name");
  instance.os_type = in.enum_value<OsType>("os_type");
  instance.os_name = in.string_or_empty("os_name");
  instance.os_version = in.string_or_empty("os_version");
  instance.os_arch = in.enum_value<OsArch>("os_arch");
  instance.addresses = addresses_from_json(in);
  instance.status = in.enum_value<InstanceStatus>("status");
  instance.provider_fault = in.base64_bytes("provider_fault").value_or(std::string());
  return instance;
}

ProviderInstance parse_provider_instance(std::string_view json_text) {
  return provider_instance_from_json(parse_json_text(json_text, "provider instance"));
}

std::vector<ProviderInstance> parse_provider_instance_list(std::string_view json_text) {
  const auto document = parse_json_text(json_text, "instance list");
  if (document.is_null()) {
    return {};
  }
  if (!document.is_array()) {
    throw WireError("(document)", std::string("expected an array, got ") + document.type_name());
  }
  std::vector<ProviderInstance> instances;
  for (std::size_t i = 0; i < document.size(); ++i) {
    instances.push_back(provider_instance_from_json(document[i], "[" + std::to_string(i) + "]"));
  }
  return instances;
}

}  // namespace garm_edge::wire
