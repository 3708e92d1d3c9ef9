#include "hypervisor/domain_xml.hpp"

#include <algorithm>
#include <sstream>

#include <pugixml.hpp>

#include "common/text.hpp"
#include "hypervisor/network_xml.hpp"

namespace garm_edge::hypervisor {
namespace {

[[noreturn]] void reject(const std::string& what, std::string_view problem) {
  throw HypervisorError(HypervisorError::Kind::invalid_argument, what + " " + std::string(problem));
}

/// XML 1.0 cannot carry control characters even as character references, so refuse them here
/// rather than hand libvirt a document it rejects (or worse, one that means something else).
void require_xml_text(std::string_view value, const std::string& what) {
  if (!is_plain_text(value)) {
    reject(what, "must be UTF-8 text without control characters");
  }
}

void append_text(pugi::xml_node parent, const char* name, std::string_view value) {
  parent.append_child(name).text().set(std::string(value).c_str());
}

/// One child of `instance` per tag, each name given `prefix` (empty: none).
void append_tags(pugi::xml_node instance, const Tags& tags, const std::string& prefix) {
  for (const auto& [key, value] : tags.entries()) {
    if (!is_valid_tag_key(key)) {
      reject("tag key \"" + printable_excerpt(key) + "\"", "must match [a-z][a-z0-9-]*");
    }
    require_xml_text(value, "tag \"" + key + "\"");
    // libvirt's XML parser may drop whitespace-only text, so such a value would not read back.
    if (!value.empty() && value.find_first_not_of(" \t") == std::string::npos) {
      reject("tag \"" + key + "\"", "must not be only spaces");
    }
    const std::string child = prefix.empty() ? key : prefix + ":" + key;
    instance.append_child(child.c_str()).text().set(value.c_str());
  }
}

void append_metadata(pugi::xml_node domain, const Tags& tags) {
  if (tags.empty()) {
    return;  // untagged: not ours to list
  }
  const std::string element = std::string(kMetadataPrefix) + ":" + std::string(kMetadataElement);
  auto instance = domain.append_child("metadata").append_child(element.c_str());
  instance.append_attribute(("xmlns:" + std::string(kMetadataPrefix)).c_str())
      .set_value(std::string(kMetadataNamespace).c_str());
  append_tags(instance, tags, std::string(kMetadataPrefix));
}

void append_os(pugi::xml_node domain, const DomainSpec& spec) {
  const auto& arch = defaults_for(spec.arch);
  auto os = domain.append_child("os");
  if (arch.uefi) {
    os.append_attribute("firmware").set_value("efi");
    // Without these libvirt prefers the firmware with Microsoft's keys enrolled and Secure Boot
    // enforced (Debian's AAVMF_CODE.ms.fd with the NVRAM template AAVMF_VARS.ms.fd), which
    // refuses any image whose boot loader they did not sign: "Access Denied" before GRUB runs.
    auto firmware = os.append_child("firmware");
    for (const char* feature : {"secure-boot", "enrolled-keys"}) {
      auto element = firmware.append_child("feature");
      element.append_attribute("enabled").set_value("no");
      element.append_attribute("name").set_value(feature);
    }
  }
  auto type = os.append_child("type");
  type.append_attribute("arch").set_value(std::string(arch.libvirt_arch).c_str());
  type.append_attribute("machine").set_value(std::string(arch.machine).c_str());
  type.text().set("hvm");
  os.append_child("boot").append_attribute("dev").set_value("hd");
  if (!spec.smbios_serial.empty()) {
    os.append_child("smbios").append_attribute("mode").set_value("sysinfo");
  }
}

void append_cpu(pugi::xml_node domain, const DomainSpec& spec, VirtType virt_type) {
  if (virt_type == VirtType::test) {
    return;
  }
  // KVM guests see the host CPU; TCG guests get every feature QEMU can emulate.
  auto cpu = domain.append_child("cpu");
  cpu.append_attribute("mode").set_value(virt_type == VirtType::kvm ? "host-passthrough"
                                                                    : "maximum");
  // Only KVM guests: under TCG, QEMU's "max" CPU without VMX and SVM left Debian 12's kernel
  // unable to name its mount points (/proc/self/mountinfo gave a run of seven 'x' for each;
  // systemd and findmnt then saw no mount), and an emulated guest's hypervisor runs in QEMU,
  // not in the host's kernel.
  if (virt_type != VirtType::kvm || spec.arch != GuestArch::x86_64 || spec.nested_virtualization) {
    return;
  }
  // Both vendors' names: QEMU drops the one the host's CPU does not have.
  for (const char* feature : {"vmx", "svm"}) {
    auto element = cpu.append_child("feature");
    element.append_attribute("policy").set_value("disable");
    element.append_attribute("name").set_value(feature);
  }
}

void append_sysinfo(pugi::xml_node domain, const DomainSpec& spec) {
  if (spec.smbios_serial.empty()) {
    return;
  }
  require_xml_text(spec.smbios_serial, "SMBIOS serial");
  auto sysinfo = domain.append_child("sysinfo");
  sysinfo.append_attribute("type").set_value("smbios");
  auto entry = sysinfo.append_child("system").append_child("entry");
  entry.append_attribute("name").set_value("serial");
  entry.text().set(spec.smbios_serial.c_str());
}

constexpr std::size_t kMaxExtraDisks = 16;
constexpr std::size_t kMaxDiskSerial = 20;

bool is_disk_serial(std::string_view serial) {
  return !serial.empty() && serial.size() <= kMaxDiskSerial &&
         std::all_of(serial.begin(), serial.end(), [](char c) {
           return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
         });
}

pugi::xml_node append_file_disk(pugi::xml_node devices, const std::string& path,
                                const std::string& format, const std::string& target_dev) {
  require_xml_text(path, "disk path");
  if (path.empty() || path.front() != '/') {
    reject("disk path", "must be an absolute path");
  }
  if (format != "qcow2" && format != "raw") {
    reject("disk format", "must be qcow2 or raw");
  }
  auto disk = devices.append_child("disk");
  disk.append_attribute("type").set_value("file");
  disk.append_attribute("device").set_value("disk");
  auto driver = disk.append_child("driver");
  driver.append_attribute("name").set_value("qemu");
  driver.append_attribute("type").set_value(format.c_str());
  driver.append_attribute("discard").set_value("unmap");
  disk.append_child("source").append_attribute("file").set_value(path.c_str());
  auto target = disk.append_child("target");
  target.append_attribute("dev").set_value(target_dev.c_str());
  target.append_attribute("bus").set_value("virtio");
  return disk;
}

void append_disks(pugi::xml_node devices, const DomainSpec& spec) {
  append_file_disk(devices, spec.disk_path, spec.disk_format, "vda");
  if (spec.extra_disks.size() > kMaxExtraDisks) {
    reject("extra disks", "at most 16");
  }
  char letter = 'b';
  for (const auto& extra : spec.extra_disks) {
    if (!is_disk_serial(extra.serial)) {
      reject("disk serial", "must be 1-20 of a-z, 0-9 and '-'");
    }
    auto disk = append_file_disk(devices, extra.path, extra.format, std::string("vd") + letter++);
    disk.append_child("serial").text().set(extra.serial.c_str());
  }
}

void append_filter(pugi::xml_node interface, const NetworkInterface& nic) {
  if (nic.filter.empty()) {
    return;
  }
  require_xml_text(nic.filter, "nwfilter name");
  if (!is_ipv4_address(nic.filter_ip)) {
    reject("nwfilter IP \"" + printable_excerpt(nic.filter_ip) + "\"", "is not an IPv4 address");
  }
  auto filterref = interface.append_child("filterref");
  filterref.append_attribute("filter").set_value(nic.filter.c_str());
  auto parameter = filterref.append_child("parameter");
  parameter.append_attribute("name").set_value("IP");
  parameter.append_attribute("value").set_value(nic.filter_ip.c_str());
}

void append_interfaces(pugi::xml_node devices, const DomainSpec& spec) {
  for (const auto& nic : spec.interfaces) {
    const bool bridged = !nic.bridge.empty();
    const auto& source = bridged ? nic.bridge : nic.network;
    require_xml_text(source, bridged ? "bridge name" : "network name");
    if (!nic.mac.empty() && !is_mac_address(nic.mac)) {
      reject("MAC address \"" + printable_excerpt(nic.mac) + "\"", "is not xx:xx:xx:xx:xx:xx");
    }
    if (bridged && !nic.network.empty()) {
      reject("interface on bridge " + printable_excerpt(nic.bridge), "cannot name a network too");
    }
    auto interface = devices.append_child("interface");
    interface.append_attribute("type").set_value(bridged ? "bridge" : "network");
    interface.append_child("source")
        .append_attribute(bridged ? "bridge" : "network")
        .set_value(source.c_str());
    if (!nic.mac.empty()) {
      interface.append_child("mac").append_attribute("address").set_value(nic.mac.c_str());
    }
    interface.append_child("model").append_attribute("type").set_value("virtio");
    // Guests boot from their disk only: SeaBIOS has no use for the NIC's iPXE ROM (and never
    // offers network boot without it). UEFI firmware has a virtio-net driver of its own.
    interface.append_child("rom").append_attribute("enabled").set_value("no");
    append_filter(interface, nic);
  }
}

void append_devices(pugi::xml_node domain, const DomainSpec& spec) {
  auto devices = domain.append_child("devices");
  append_disks(devices, spec);
  append_interfaces(devices, spec);
  // Devices libvirt adds by default that a runner never uses: a USB controller and a memory
  // balloon the agent never inflates. Every emulated device is host code a hostile guest can
  // reach, so guests get none they do not need.
  auto usb = devices.append_child("controller");
  usb.append_attribute("type").set_value("usb");
  usb.append_attribute("model").set_value("none");
  devices.append_child("memballoon").append_attribute("model").set_value("none");
  devices.append_child("serial").append_attribute("type").set_value("pty");
  devices.append_child("console").append_attribute("type").set_value("pty");
  auto rng = devices.append_child("rng");
  rng.append_attribute("model").set_value("virtio");
  auto backend = rng.append_child("backend");
  backend.append_attribute("model").set_value("random");
  backend.text().set("/dev/urandom");
}

/// Domain and volume names become file names on the host (logs, sockets, overlays): plain
/// tokens only.
void require_object_name(std::string_view name, const std::string& what) {
  const bool ok_length = !name.empty() && name.size() <= 200;
  const bool ok_chars = name.find_first_not_of(
                            "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                            "0123456789._-") == std::string_view::npos;
  if (!ok_length || !ok_chars || name.front() == '.' || name.find("..") != std::string_view::npos) {
    reject(what + " \"" + printable_excerpt(name) + "\"",
           "must be 1 to 200 of [A-Za-z0-9._-], not starting with '.' or holding \"..\"");
  }
}

void validate_identity(const DomainSpec& spec) {
  require_object_name(spec.name, "domain name");
  require_xml_text(spec.uuid, "domain UUID");
  if (spec.vcpus == 0 || spec.memory_mib == 0) {
    reject("domain \"" + spec.name + "\"", "needs at least one vCPU and some memory");
  }
}

std::string to_indented_text(const pugi::xml_document& document) {
  std::ostringstream out;
  document.save(out, "  ", pugi::format_indent | pugi::format_no_declaration);
  return out.str();
}

pugi::xml_document parse_or_throw(std::string_view xml, const char* what) {
  pugi::xml_document document;
  const auto result = document.load_buffer(xml.data(), xml.size());
  if (!result) {
    throw HypervisorError(HypervisorError::Kind::failed,
                          std::string("unreadable ") + what + ": " + result.description());
  }
  return document;
}

}  // namespace

bool is_valid_tag_key(std::string_view key) {
  if (key.empty() || key.size() > 64 || key.front() < 'a' || key.front() > 'z') {
    return false;
  }
  for (char c : key) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) {
      return false;
    }
  }
  return true;
}

std::string render_domain_xml(const DomainSpec& spec, VirtType virt_type) {
  validate_identity(spec);
  pugi::xml_document document;
  auto domain = document.append_child("domain");
  domain.append_attribute("type").set_value(std::string(to_string(virt_type)).c_str());
  append_text(domain, "name", spec.name);
  if (!spec.uuid.empty()) {
    append_text(domain, "uuid", spec.uuid);
  }
  if (spec.generation_id && spec.arch == GuestArch::x86_64) {
    domain.append_child("genid");  // empty: libvirt picks the value, and a new one on restore
  }
  append_metadata(domain, spec.tags);
  auto memory = domain.append_child("memory");
  memory.append_attribute("unit").set_value("MiB");
  memory.text().set(static_cast<unsigned long long>(spec.memory_mib));
  domain.append_child("vcpu").text().set(spec.vcpus);
  append_sysinfo(domain, spec);
  append_os(domain, spec);
  auto features = domain.append_child("features");
  features.append_child("acpi");
  if (spec.arch == GuestArch::x86_64) {
    features.append_child("apic");
  }
  append_cpu(domain, spec, virt_type);
  append_text(domain, "on_poweroff", "destroy");
  append_text(domain, "on_reboot", "restart");
  append_text(domain, "on_crash", "destroy");
  append_devices(domain, spec);
  return to_indented_text(document);
}

std::string render_overlay_volume_xml(const VolumeSpec& spec) {
  require_object_name(spec.name, "volume name");
  require_xml_text(spec.backing_path, "backing store path");
  if (!spec.backing_path.empty() && spec.backing_path.front() != '/') {
    reject("backing store path", "must be an absolute path");
  }
  if (spec.format != "qcow2" && spec.format != "raw") {
    reject("volume format", "must be qcow2 or raw");
  }
  pugi::xml_document document;
  auto volume = document.append_child("volume");
  volume.append_attribute("type").set_value("file");
  append_text(volume, "name", spec.name);
  auto capacity = volume.append_child("capacity");
  capacity.append_attribute("unit").set_value("bytes");
  capacity.text().set(static_cast<unsigned long long>(spec.capacity_bytes));
  // A thin overlay: without this libvirt assumes allocation == capacity and may refuse the
  // volume for lack of space the overlay will never use.
  append_text(volume, "allocation", "0");
  auto target = volume.append_child("target");
  target.append_child("format").append_attribute("type").set_value(spec.format.c_str());
  append_text(target.append_child("permissions"), "mode", "0600");
  if (spec.backing_path.empty()) {
    return to_indented_text(document);  // an empty disk: a scratch disk the guest formats
  }
  auto backing = volume.append_child("backingStore");
  append_text(backing, "path", spec.backing_path);
  backing.append_child("format").append_attribute("type").set_value(spec.backing_format.c_str());
  return to_indented_text(document);
}

std::string tags_metadata_element(const Tags& tags) {
  pugi::xml_document document;
  append_tags(document.append_child(std::string(kMetadataElement).c_str()), tags, "");
  std::ostringstream out;
  document.save(out, "", pugi::format_raw | pugi::format_no_declaration);
  return out.str();
}

Tags parse_tags_metadata(std::string_view metadata_xml) {
  const auto document = parse_or_throw(metadata_xml, "domain metadata");
  Tags tags;
  for (auto child : document.document_element().children()) {
    if (child.type() != pugi::node_element) {
      continue;
    }
    // libvirt hands the element back without our prefix; accept both spellings.
    std::string_view key = child.name();
    if (const auto colon = key.find(':'); colon != std::string_view::npos) {
      key.remove_prefix(colon + 1);
    }
    tags.set(std::string(key), child.text().get());
  }
  return tags;
}

std::string parse_pool_path(std::string_view pool_xml) {
  const auto document = parse_or_throw(pool_xml, "storage pool XML");
  return document.child("pool").child("target").child("path").text().get();
}

std::vector<std::string> parse_disk_paths(std::string_view domain_xml) {
  const auto document = parse_or_throw(domain_xml, "domain XML");
  std::vector<std::string> paths;
  for (auto disk : document.child("domain").child("devices").children("disk")) {
    if (std::string_view(disk.attribute("device").as_string("disk")) != "disk") {
      continue;
    }
    const auto source = disk.child("source");
    if (const auto file = source.attribute("file"); file) {
      paths.emplace_back(file.value());
    }
  }
  return paths;
}

}  // namespace garm_edge::hypervisor
