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

std::string random_mac() {
  std::array<unsigned char, 3> bytes{};
  net::random_bytes(bytes);
  std::string mac = "52:54:00";
  for (const unsigned char byte : bytes) {
    mac += ':';
    append_hex(mac, byte);
  }
  return mac;
}

std::string domain_name_for(std::string_view controller_id, std::string_view instance_name) {
  return std::string(kDomainNamePrefix) + std::string(controller_id) + "-" +
         std::string(instance_name);
}

std::optional<std::pair<std::string, std::string>> instance_of_domain_name(
    std::string_view domain_name) {
  constexpr std::size_t kUuidLength = 36;
  if (!domain_name.starts_with(kDomainNamePrefix)) {
    return std::nullopt;
  }
  const auto rest = domain_name.substr(kDomainNamePrefix.size());
  if (rest.size() < kUuidLength + 2 || rest[kUuidLength] != '-') {
    return std::nullopt;
  }
  return std::pair{std::string(rest.substr(0, kUuidLength)),
                   std::string(rest.substr(kUuidLength + 1))};
}

namespace {

constexpr std::string_view kCacheSuffix = ".cache";
constexpr std::string_view kScratchSuffix = ".scratch";
constexpr std::string_view kMemorySuffix = ".memory";

}  // namespace

std::optional<std::string> domain_name_of_volume(std::string_view volume_name) {
  constexpr std::string_view kSuffix = ".qcow2";
  auto stem = volume_name;
  if (stem.ends_with(kCacheSuffix) || stem.ends_with(kScratchSuffix)) {
    // "<domain>.<cache>.cache", "<domain>.<n>.scratch": neither part has a '.', so the last one
    // ends the domain's name.
    stem.remove_suffix(stem.ends_with(kCacheSuffix) ? kCacheSuffix.size() : kScratchSuffix.size());
    const auto dot = stem.rfind('.');
    if (dot == std::string_view::npos) {
      return std::nullopt;
    }
    stem = stem.substr(0, dot);
  } else if (stem.ends_with(kSuffix)) {
    stem.remove_suffix(kSuffix.size());
  } else if (stem.ends_with(kMemorySuffix)) {
    stem.remove_suffix(kMemorySuffix.size());
  } else {
    return std::nullopt;
  }
  if (stem.size() <= kDomainNamePrefix.size() || !stem.starts_with(kDomainNamePrefix)) {
    return std::nullopt;
  }
  return std::string(stem);
}

std::string volume_name_for(std::string_view domain_name) {
  return std::string(domain_name) + ".qcow2";
}

std::string memory_volume_name_for(std::string_view domain_name) {
  return std::string(domain_name) + std::string(kMemorySuffix);
}

std::string cache_volume_name_for(std::string_view domain_name, std::string_view cache) {
  return std::string(domain_name) + "." + std::string(cache) + std::string(kCacheSuffix);
}

std::string scratch_volume_name_for(std::string_view domain_name, std::size_t index) {
  return std::string(domain_name) + "." + std::to_string(index) + std::string(kScratchSuffix);
}

}  // namespace garm_edge::agent
