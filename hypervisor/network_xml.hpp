#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/hex.hpp"
#include "hypervisor/hypervisor.hpp"

namespace garm_edge::hypervisor {

/// The first IPv4 <ip> of a network's XML, with its DHCP ranges and host reservations.
NetworkInfo parse_network_xml(std::string_view network_xml);

/// `<host mac='…' ip='…'/>` for virNetworkUpdate. Throws invalid_argument for a value that is
/// not a MAC or a dotted IPv4 address.
std::string render_dhcp_host_xml(const DhcpHost& host);

struct NamedFilter {
  std::string name;
  std::string xml;
};

/// The nwfilters behind `name`, in the order they must be defined: one each for the source
/// MAC, the ARP sender MAC, the ARP sender address and the IPv4 source, and `name` itself
/// (last), which refers to them. Guests may send only from their MAC and the interface's IP
/// parameter (and DHCP from 0.0.0.0), like libvirt's clean-traffic.
std::vector<NamedFilter> render_anti_spoofing_filters(std::string_view name);

/// `filter_xml` with `<uuid>` set to `uuid` (unchanged when `uuid` is empty): redefining an
/// existing nwfilter needs its UUID.
std::string with_filter_uuid(const std::string& filter_xml, const std::string& uuid);

using garm_edge::is_mac_address;
bool is_ipv4_address(std::string_view address);

}  // namespace garm_edge::hypervisor
