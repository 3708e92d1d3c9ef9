// Arbitrary tag values and names: the domain XML is refused or it is well-formed and every
// value reads back exactly, so no input can add or change an element.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <pugixml.hpp>

#include "hypervisor/domain_xml.hpp"

namespace {

std::vector<std::string> split(std::string_view text) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  for (std::size_t i = 0; i <= text.size(); ++i) {
    if (i == text.size() || text[i] == '\x1f') {
      parts.emplace_back(text.substr(start, i - start));
      start = i + 1;
    }
  }
  return parts;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace garm_edge::hypervisor;
  const auto parts = split(std::string_view(reinterpret_cast<const char*>(data), size));
  DomainSpec spec;
  spec.name = parts[0];
  spec.uuid = "0b6f5b8e-3a52-4c8e-9c1f-2a3b4c5d6e7f";
  spec.disk_path = "/var/lib/libvirt/images/" + std::string(parts.size() > 1 ? parts[1] : "x");
  spec.smbios_serial = parts.size() > 2 ? parts[2] : "";
  for (std::size_t i = 3; i < parts.size(); ++i) {
    spec.tags.set("tag-" + std::to_string(i), parts[i]);
  }
  std::string xml;
  try {
    xml = render_domain_xml(spec, VirtType::kvm);
  } catch (const HypervisorError&) {
    return 0;
  }
  pugi::xml_document document;
  if (!document.load_string(xml.c_str())) {
    std::abort();
  }
  const auto domain = document.child("domain");
  if (domain.child("name").text().get() != spec.name ||
      std::distance(domain.children("devices").begin(), domain.children("devices").end()) != 1) {
    std::abort();
  }
  if (const auto instance = domain.child("metadata").first_child()) {
    std::ostringstream metadata;
    instance.print(metadata);
    if (!(parse_tags_metadata(metadata.str()) == spec.tags)) {
      std::abort();
    }
  }
  return 0;
}
