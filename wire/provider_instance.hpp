#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "wire/enums.hpp"

namespace garm_edge::wire {

struct Address {
  std::string address;
  AddressType type = AddressType::private_address;

  bool operator==(const Address&) const = default;
};

/// garm-provider-common params.ProviderInstance: what CreateInstance and GetInstance print, and
/// each element of ListInstances. Every field is omitempty on the wire.
struct ProviderInstance {
  std::string provider_id;
  std::string name;
  std::optional<OsType> os_type;
  std::string os_name;
  std::string os_version;
  std::optional<OsArch> os_arch;
  std::vector<Address> addresses;
  std::optional<InstanceStatus> status;
  /// Raw bytes; base64 on the wire (a Go []byte).
  std::string provider_fault;

  bool operator==(const ProviderInstance&) const = default;
};

nlohmann::ordered_json to_json(const ProviderInstance& instance);
nlohmann::ordered_json to_json(const std::vector<ProviderInstance>& instances);

/// Parses one instance as garm reads it; throws WireError naming the field that is wrong.
ProviderInstance provider_instance_from_json(const nlohmann::json& value,
                                             const std::string& path = "");
ProviderInstance parse_provider_instance(std::string_view json_text);
/// A ListInstances answer: an array, or `null` which garm also accepts.
std::vector<ProviderInstance> parse_provider_instance_list(std::string_view json_text);

}  // namespace garm_edge::wire
