#include "hypervisor/network_xml.hpp"

#include <arpa/inet.h>
#include <sstream>
#include <stdexcept>

#include <pugixml.hpp>

#include "common/hex.hpp"
#include "common/text.hpp"

namespace garm_edge::hypervisor {
namespace {

std::string to_compact_text(const pugi::xml_document& document) {
  std::ostringstream out;
  document.save(out, "", pugi::format_raw | pugi::format_no_declaration);
  return out.str();
}

unsigned prefix_of(const pugi::xml_node& ip) {
  if (const auto prefix = ip.attribute("prefix"); prefix) {
    return prefix.as_uint();
  }
  in_addr mask{};
  if (::inet_pton(AF_INET, ip.attribute("netmask").as_string(), &mask) != 1) {
    return 0;
  }
  return static_cast<unsigned>(__builtin_popcount(ntohl(mask.s_addr)));
}

bool is_ipv4_element(const pugi::xml_node& ip) {
  const std::string_view family = ip.attribute("family").as_string("ipv4");
  return family == "ipv4" && is_ipv4_address(ip.attribute("address").as_string());
}

}  // namespace

bool is_ipv4_address(std::string_view address) {
  in_addr parsed{};
  return address.size() <= 15 && ::inet_pton(AF_INET, std::string(address).c_str(), &parsed) == 1;
}

NetworkInfo parse_network_xml(std::string_view network_xml) {
  pugi::xml_document document;
  if (!document.load_buffer(network_xml.data(), network_xml.size())) {
    throw HypervisorError(HypervisorError::Kind::failed, "unreadable network XML");
  }
  const auto network = document.child("network");
  NetworkInfo info;
  info.name = network.child("name").text().get();
  info.forward_mode =
      network.child("forward").attribute("mode").as_string(network.child("forward") ? "nat" : "");
  info.bridge = network.child("bridge").attribute("name").as_string();
  for (const auto ip : network.children("ip")) {
    if (!is_ipv4_element(ip)) {
      continue;
    }
    info.gateway = ip.attribute("address").as_string();
    info.prefix = prefix_of(ip);
    for (const auto range : ip.child("dhcp").children("range")) {
      info.ranges.push_back({.start = range.attribute("start").as_string(),
                             .end = range.attribute("end").as_string()});
    }
    for (const auto host : ip.child("dhcp").children("host")) {
      info.hosts.push_back(
          {.mac = host.attribute("mac").as_string(), .ip = host.attribute("ip").as_string()});
    }
    break;
  }
  return info;
}

std::string render_dhcp_host_xml(const DhcpHost& host) {
  if (!is_mac_address(host.mac) || !is_ipv4_address(host.ip)) {
    throw HypervisorError(HypervisorError::Kind::invalid_argument,
                          "DHCP reservation needs a MAC and an IPv4 address, not \"" +
                              printable_excerpt(host.mac) + "\" and \"" +
                              printable_excerpt(host.ip) + "\"");
  }
  pugi::xml_document document;
  auto element = document.append_child("host");
  element.append_attribute("mac").set_value(host.mac.c_str());
  element.append_attribute("ip").set_value(host.ip.c_str());
  return to_compact_text(document);
}

namespace {

/// A filter of `chain` whose outgoing rules return (let pass) what matches one of `allowed`
/// and drop the rest, as libvirt's no-*-spoofing filters do.
struct AllowOnly {
  const char* suffix;
  const char* chain;
  const char* priority;
  const char* protocol;  // the rule element: mac, arp or ip
  std::vector<std::vector<std::pair<const char*, const char*>>> allowed;
};

std::string render_allow_only(const std::string& name, const AllowOnly& spec) {
  pugi::xml_document document;
  auto filter = document.append_child("filter");
  filter.append_attribute("name").set_value(name.c_str());
  filter.append_attribute("chain").set_value(spec.chain);
  filter.append_attribute("priority").set_value(spec.priority);
  const auto rule = [&filter](const char* action, const char* priority) {
    auto added = filter.append_child("rule");
    added.append_attribute("action").set_value(action);
    added.append_attribute("direction").set_value("out");
    added.append_attribute("priority").set_value(priority);
    return added;
  };
  for (const auto& match : spec.allowed) {
    auto element = rule("return", "100").append_child(spec.protocol);
    for (const auto& [attribute, value] : match) {
      element.append_attribute(attribute).set_value(value);
    }
  }
  rule("drop", "1000");
  return to_compact_text(document);
}

}  // namespace

std::vector<NamedFilter> render_anti_spoofing_filters(std::string_view name) {
  const std::string top(name);
  // DHCP discover and request leave from 0.0.0.0 before the guest has its address (as in
  // libvirt's own no-ip-spoofing filter); without this the guest never gets its reservation.
  const std::vector<std::pair<const char*, const char*>> dhcp = {{"srcipaddr", "0.0.0.0"},
                                                                 {"dstipaddr", "255.255.255.255"},
                                                                 {"protocol", "udp"},
                                                                 {"srcportstart", "68"},
                                                                 {"dstportstart", "67"}};
  // Priorities as in libvirt's clean-traffic: MAC first, then ARP, then IPv4. ARP matters as
  // much as IPv4: a guest answering ARP for another's address receives the host's replies to
  // it, seeds included.
  const AllowOnly parts[] = {
      {"-mac", "mac", "-800", "mac", {{{"srcmacaddr", "$MAC"}}}},
      {"-arp-mac", "arp-mac", "-520", "arp", {{{"arpsrcmacaddr", "$MAC"}}}},
      {"-arp-ip",
       "arp-ip",
       "-510",
       "arp",
       {{{"arpsrcipaddr", "$IP"}}, {{"arpsrcipaddr", "0.0.0.0"}}}},
      {"-ipv4", "ipv4-ip", "-710", "ip", {{{"srcipaddr", "$IP"}}, dhcp}},
  };
  std::vector<NamedFilter> filters;
  pugi::xml_document document;
  auto root = document.append_child("filter");
  root.append_attribute("name").set_value(top.c_str());
  root.append_attribute("chain").set_value("root");
  for (const auto& part : parts) {
    const auto part_name = top + part.suffix;
    filters.push_back({part_name, render_allow_only(part_name, part)});
    root.append_child("filterref").append_attribute("filter").set_value(part_name.c_str());
  }
  filters.push_back({top, to_compact_text(document)});  // last: it refers to the others
  return filters;
}

std::string with_filter_uuid(const std::string& filter_xml, const std::string& uuid) {
  if (uuid.empty()) {
    return filter_xml;
  }
  pugi::xml_document document;
  if (!document.load_string(filter_xml.c_str())) {
    throw HypervisorError(HypervisorError::Kind::invalid_argument, "nwfilter XML does not parse");
  }
  auto filter = document.child("filter");
  filter.remove_child("uuid");
  filter.prepend_child("uuid").text().set(uuid.c_str());
  return to_compact_text(document);
}

}  // namespace garm_edge::hypervisor
