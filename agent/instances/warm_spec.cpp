#include "agent/instances/warm_spec.hpp"

#include "net/secret_token.hpp"

namespace garm_edge::agent {

std::string warm_spec_of(const AgentConfig& config, const WarmConfig& warm) {
  const auto* image = config.find_image(warm.image);
  const auto* flavor = config.find_flavor(warm.flavor);
  // The controller too: a guest made for one controller is retired, never handed to another,
  // when its entry changes hands.
  std::string shape = warm.controller + "|" + warm.image + "/" + warm.flavor;
  if (image != nullptr) {
    shape += "|" + image->base_volume + "|" + image->base_path + "|" + image->base_format + "|" +
             std::string(wire::to_string(image->os_type)) + "|" +
             std::string(wire::to_string(image->arch));
  }
  if (flavor != nullptr) {
    shape += "|" + std::to_string(flavor->vcpus) + "|" + std::to_string(flavor->memory_mib) + "|" +
             std::to_string(flavor->disk_gib);
  }
  return net::sha256_hex(shape).substr(0, 16);
}

std::string warm_pool_id(std::string_view spec) {
  const auto hash = net::sha256_hex(spec);
  return hash.substr(0, 8) + "-" + hash.substr(8, 4) + "-" + hash.substr(12, 4) + "-" +
         hash.substr(16, 4) + "-" + hash.substr(20, 12);
}

}  // namespace garm_edge::agent
