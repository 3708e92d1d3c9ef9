#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "hypervisor/guest_arch.hpp"
#include "hypervisor/hypervisor.hpp"

namespace garm_edge::hypervisor {

/// Our namespace for the domain <metadata> element. One element, `instance`, with one child
/// element per tag.
inline constexpr std::string_view kMetadataNamespace = "https://garm-edge.dev/xmlns/domain/1";
inline constexpr std::string_view kMetadataPrefix = "garm-edge";
inline constexpr std::string_view kMetadataElement = "instance";

/// Domain XML for `spec`, built with an XML writer. Throws HypervisorError(invalid_argument) for
/// values XML cannot carry (control characters, invalid UTF-8) or bad tag keys.
std::string render_domain_xml(const DomainSpec& spec, VirtType virt_type);
std::string render_overlay_volume_xml(const VolumeSpec& spec);

/// Reads the tags from what virDomainGetMetadata returns (the element without prefix).
Tags parse_tags_metadata(std::string_view metadata_xml);
/// The metadata element for virDomainSetMetadata: `<instance>` with one child per tag, without
/// a namespace (libvirt gives it kMetadataPrefix and kMetadataNamespace). Throws HypervisorError
/// for a tag domain XML cannot carry, as domain_xml() does.
std::string tags_metadata_element(const Tags& tags);
/// The target path of a storage pool, from its XML.
std::string parse_pool_path(std::string_view pool_xml);
/// File paths of the disk devices in a domain's XML.
std::vector<std::string> parse_disk_paths(std::string_view domain_xml);

/// Tag keys are XML element names we choose: `[a-z][a-z0-9-]*`, at most 64 bytes.
bool is_valid_tag_key(std::string_view key);

}  // namespace garm_edge::hypervisor
