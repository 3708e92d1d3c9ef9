#include "agent/instances/identifiers.hpp"

#include <array>
#include <cstdint>
#include <cstdio>
#include <random>

namespace garm_edge::agent {

std::string random_uuid() {
  std::random_device entropy;  // getrandom(2) on Linux
  std::array<std::uint8_t, 16> bytes{};
  for (std::size_t i = 0; i < bytes.size(); i += 4) {
    const auto word = entropy();
    for (std::size_t k = 0; k < 4; ++k) {
      bytes[i + k] = static_cast<std::uint8_t>(word >> (8 * k));
    }
  }
  bytes[6] = static_cast<std::uint8_t>((bytes[6] & 0x0f) | 0x40);  // version 4
  bytes[8] = static_cast<std::uint8_t>((bytes[8] & 0x3f) | 0x80);  // RFC 4122 variant
  char text[37] = {};
  std::snprintf(text, sizeof text,
                "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", bytes[0],
                bytes[1], bytes[2], bytes[3], bytes[4], bytes[5], bytes[6], bytes[7], bytes[8],
                bytes[9], bytes[10], bytes[11], bytes[12], bytes[13], bytes[14], bytes[15]);
  return text;
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
  return std::string(volume_name.substr(0, volume_name.size() - kSuffix.size()));
}

std::string volume_name_for(std::string_view domain_name) {
  return std::string(domain_name) + ".qcow2";
}

}  // namespace garm_edge::agent
