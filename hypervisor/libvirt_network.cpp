// LibvirtHypervisor's network members: DHCP reservations and nwfilters for guest identity.

#include "hypervisor/libvirt_call.hpp"
#include "hypervisor/network_xml.hpp"

namespace garm_edge::hypervisor {

using namespace libvirt;
using Kind = HypervisorError::Kind;

namespace {

struct NetworkFree {
  void operator()(virNetworkPtr network) const { virNetworkFree(network); }
};
struct FilterFree {
  void operator()(virNWFilterPtr filter) const { virNWFilterFree(filter); }
};
using NetworkHandle = std::unique_ptr<virNetwork, NetworkFree>;
using FilterHandle = std::unique_ptr<virNWFilter, FilterFree>;

NetworkHandle require_network(virConnectPtr conn, const std::string& name) {
  NetworkHandle network(virNetworkLookupByName(conn, name.c_str()));
  if (!network) {
    throw_last_error("find network " + name);
  }
  return network;
}

std::string network_xml_of(virNetworkPtr network, const std::string& name) {
  CString xml(virNetworkGetXMLDesc(network, 0));
  if (!xml) {
    throw_last_error("read network " + name);
  }
  return xml.get();
}

/// A running network takes the change at once and keeps it; a stopped one only keeps it.
unsigned update_scope(virNetworkPtr network) {
  unsigned flags = 0;
  if (virNetworkIsActive(network) == 1) {
    flags |= VIR_NETWORK_UPDATE_AFFECT_LIVE;
  }
  if (virNetworkIsPersistent(network) == 1) {
    flags |= VIR_NETWORK_UPDATE_AFFECT_CONFIG;
  }
  return flags;
}

bool reserves(const NetworkInfo& info, const DhcpHost& host) {
  for (const auto& existing : info.hosts) {
    if (existing.mac == host.mac && existing.ip == host.ip) {
      return true;
    }
  }
  return false;
}

}  // namespace

NetworkInfo LibvirtHypervisor::network(std::string_view name) {
  return call("read network " + std::string(name),
              [name = std::string(name)](Session&, virConnectPtr conn) {
                auto network = require_network(conn, name);
                auto info = parse_network_xml(network_xml_of(network.get(), name));
                info.active = virNetworkIsActive(network.get()) == 1;
                return info;
              });
}

void LibvirtHypervisor::add_dhcp_host(std::string_view network, const DhcpHost& host) {
  auto xml = render_dhcp_host_xml(host);
  call("reserve " + host.ip + " on network " + std::string(network),
       [name = std::string(network), xml = std::move(xml), host](Session&, virConnectPtr conn) {
         auto handle = require_network(conn, name);
         if (virNetworkUpdate(handle.get(), VIR_NETWORK_UPDATE_COMMAND_ADD_LAST,
                              VIR_NETWORK_SECTION_IP_DHCP_HOST, -1, xml.c_str(),
                              update_scope(handle.get())) < 0) {
           const auto failure = Failure::capture();
           // libvirt refuses a second entry for the same MAC or IP as an invalid operation.
           if (failure.code == VIR_ERR_OPERATION_INVALID) {
             throw HypervisorError(Kind::already_exists, "reserve " + host.ip + " for " + host.mac +
                                                             " on network " + name + ": " +
                                                             failure.message);
           }
           failure.raise("reserve " + host.ip + " on network " + name);
         }
       });
}

bool LibvirtHypervisor::remove_dhcp_host(std::string_view network, const DhcpHost& host) {
  auto xml = render_dhcp_host_xml(host);
  return call(
      "release " + host.ip + " on network " + std::string(network),
      [name = std::string(network), xml = std::move(xml), host](Session&, virConnectPtr conn) {
        auto handle = require_network(conn, name);
        if (!reserves(parse_network_xml(network_xml_of(handle.get(), name)), host)) {
          return false;
        }
        if (virNetworkUpdate(handle.get(), VIR_NETWORK_UPDATE_COMMAND_DELETE,
                             VIR_NETWORK_SECTION_IP_DHCP_HOST, -1, xml.c_str(),
                             update_scope(handle.get())) < 0) {
          throw_last_error("release " + host.ip + " on network " + name);
        }
        return true;
      });
}

bool LibvirtHypervisor::has_filter(std::string_view name) {
  return call("find nwfilter " + std::string(name),
              [name = std::string(name)](Session&, virConnectPtr conn) {
                FilterHandle filter(virNWFilterLookupByName(conn, name.c_str()));
                if (filter) {
                  return true;
                }
                const auto failure = Failure::capture();
                if (failure.code == VIR_ERR_NO_NWFILTER) {
                  return false;
                }
                failure.raise("find nwfilter " + name);
              });
}

void LibvirtHypervisor::define_source_ip_filter(std::string_view name) {
  for (auto& filter : render_anti_spoofing_filters(name)) {
    call("define nwfilter " + filter.name, [filter](Session&, virConnectPtr conn) {
      // libvirt refuses a definition without the UUID of the filter it replaces, so an agent
      // restart on a host that has the filters must name theirs.
      std::string uuid;
      if (FilterHandle existing(virNWFilterLookupByName(conn, filter.name.c_str())); existing) {
        char text[VIR_UUID_STRING_BUFLEN] = {};
        if (virNWFilterGetUUIDString(existing.get(), text) == 0) {
          uuid = text;
        }
      }
      const auto xml = with_filter_uuid(filter.xml, uuid);
      FilterHandle defined(virNWFilterDefineXML(conn, xml.c_str()));
      if (!defined) {
        throw_last_error("define nwfilter " + filter.name);
      }
    });
  }
}

}  // namespace garm_edge::hypervisor
