#pragma once

#include <string>
#include <string_view>

namespace garm_edge::agent {

/// A random (version 4) UUID from the kernel's CSPRNG.
std::string random_uuid();

/// The libvirt domain name of garm instance `name` owned by `controller_id`. The controller's
/// first eight hex digits keep two controllers' instances of the same name apart on one host,
/// and the name stays readable in `virsh list`.
std::string domain_name_for(std::string_view controller_id, std::string_view instance_name);

/// The overlay volume of a domain.
std::string volume_name_for(std::string_view domain_name);

}  // namespace garm_edge::agent
