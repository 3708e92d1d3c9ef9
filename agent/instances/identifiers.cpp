#include "agent/instances/identifiers.hpp"

#include <array>

#include "common/hex.hpp"
#include "net/random.hpp"

namespace garm_edge::agent {

std::string random_uuid() {
  std::array<unsigned char, 16> bytes{};
  net::random_bytes(bytes);
  bytes[6] = static_cast<unsigned char>((bytes[6] & 0x0fU) | 0x40U);  // version 4
  bytes[8] = static_cast<unsigned char>((bytes[8] & 0x3fU) | 0x80U);  // RFC 4122 variant
  return format_uuid(bytes);
}

std::string domain_name_for(std::string_view controller_id, std::string_view instance_name) {
  return std::string(kDomainNamePrefix) + std::string(controller_id) + "-" +
         std::string(instance_name);
}

std::optional<std::string> domain_name_of_volume(std::string_view volume_name) {
  constexpr std::string_view kSuffix = ".qcow2";
  if (volume_name.size() <= kDomainNamePrefix.size() + kSuffix.size() ||
      volume_name.substr(0, kDomainNamePrefix.size()) != kDomainNamePrefix ||
      volume_name.substr(volume_name.size() - kSuffix.size()) != kSuffix) {
    return std::nullopt;
  }
  auto stem = volume_name.substr(0, volume_name.size() - kSuffix.size());
  // A cache overlay's: instance names have no '+', so the first one ends the domain's name.
  return std::string(stem.substr(0, stem.find('+')));
}

std::string cache_volume_name_for(std::string_view domain_name, std::string_view cache) {
  return std::string(domain_name) + "+cache-" + std::string(cache) + ".qcow2";
}

std::string volume_name_for(std::string_view domain_name) {
  return std::string(domain_name) + ".qcow2";
}

}  // namespace garm_edge::agent
