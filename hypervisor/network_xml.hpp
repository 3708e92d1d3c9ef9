#pragma once

#include <string>
#include <string_view>

#include "hypervisor/hypervisor.hpp"

namespace garm_edge::hypervisor {

/// The first IPv4 <ip> of a network's XML, with its DHCP ranges and host reservations.
NetworkInfo parse_network_xml(std::string_view network_xml);

/// `<host mac='…' ip='…'/>` for virNetworkUpdate. Throws invalid_argument for a value that is
/// not a MAC or a dotted IPv4 address.
std::string render_dhcp_host_xml(const DhcpHost& host);

/// An nwfilter that lets IPv4 out only from the interface's `IP` parameter (measured to stop a
/// second guest from taking a reserved address: docs/guests.md).
std::string render_source_ip_filter_xml(std::string_view name);

bool is_mac_address(std::string_view mac);
bool is_ipv4_address(std::string_view address);

}  // namespace garm_edge::hypervisor
