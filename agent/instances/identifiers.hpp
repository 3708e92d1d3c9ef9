#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace garm_edge::agent {

/// A random (version 4) UUID from the kernel's CSPRNG.
std::string random_uuid();
/// A MAC in QEMU's 52:54:00 block with three random bytes.
std::string random_mac();

inline constexpr std::string_view kDomainNamePrefix = "garm-edge-";

/// The libvirt domain name of garm instance `name` owned by `controller_id`:
/// `garm-edge-<controller UUID>-<name>`. The whole controller ID keeps two controllers'
/// instances of the same name apart on one host; the name stays readable in `virsh list`.
std::string domain_name_for(std::string_view controller_id, std::string_view instance_name);
/// The controller ID and instance name domain_name_for made `domain_name` of; nothing for a
/// name it does not make.
std::optional<std::pair<std::string, std::string>> instance_of_domain_name(
    std::string_view domain_name);

/// The overlay volume of a domain.
std::string volume_name_for(std::string_view domain_name);
/// The raw volume a saved warm guest's memory state is written to.
std::string memory_volume_name_for(std::string_view domain_name);
/// The overlay of cache `cache` for the domain, "<domain>.<cache>.cache" (domain_name_of_volume
/// finds the domain).
std::string cache_volume_name_for(std::string_view domain_name, std::string_view cache);
/// Scratch disk `index` of the domain, "<domain>.<index>.scratch", in its scratch pool.
std::string scratch_volume_name_for(std::string_view domain_name, std::size_t index);
/// The domain an overlay volume was made for, when the name follows volume_name_for.
std::optional<std::string> domain_name_of_volume(std::string_view volume_name);

}  // namespace garm_edge::agent
