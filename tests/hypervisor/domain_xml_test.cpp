#include "hypervisor/domain_xml.hpp"

#include <map>

#include <catch2/catch.hpp>
#include <pugixml.hpp>

using namespace garm_edge::hypervisor;

namespace {

DomainSpec sample_spec() {
  DomainSpec spec;
  spec.name = "garm-edge-9dcf590a-garm-abc";
  spec.uuid = "0b6f5b8e-3a52-4c8e-9c1f-2a3b4c5d6e7f";
  spec.vcpus = 2;
  spec.memory_mib = 2048;
  spec.disk_path = "/var/lib/libvirt/images/garm-edge-9dcf590a-garm-abc.qcow2";
  spec.interfaces.push_back({.network = "default",
                             .bridge = "",
                             .mac = "52:54:00:12:34:56",
                             .filter = "",
                             .filter_ip = ""});
  spec.tags = Tags{{"controller-id", "c"}, {"pool-id", "p"}};
  return spec;
}

pugi::xml_document parse(const std::string& xml) {
  pugi::xml_document document;
  REQUIRE(document.load_string(xml.c_str()));
  return document;
}

}  // namespace

TEST_CASE("domain XML carries our namespaced metadata and per-arch defaults", "[xml]") {
  const auto xml = render_domain_xml(sample_spec(), VirtType::kvm);
  const auto document = parse(xml);
  const auto domain = document.child("domain");
  CHECK(std::string(domain.attribute("type").value()) == "kvm");
  const auto instance = domain.child("metadata").child("garm-edge:instance");
  CHECK(std::string(instance.attribute("xmlns:garm-edge").value()) == kMetadataNamespace);
  CHECK(std::string(instance.child("garm-edge:pool-id").text().get()) == "p");
  CHECK(std::string(domain.child("os").child("type").attribute("machine").value()) == "q35");
  CHECK(domain.child("os").attribute("firmware").empty());
  CHECK(std::string(domain.child("cpu").attribute("mode").value()) == "host-passthrough");
  CHECK(std::string(
            domain.child("devices").child("interface").child("mac").attribute("address").value()) ==
        "52:54:00:12:34:56");
}

TEST_CASE("aarch64 guests boot UEFI on the virt machine, TCG gets the maximum CPU", "[xml]") {
  auto spec = sample_spec();
  spec.arch = GuestArch::aarch64;
  const auto document = parse(render_domain_xml(spec, VirtType::qemu));
  const auto os = document.child("domain").child("os");
  CHECK(std::string(os.attribute("firmware").value()) == "efi");
  // Unsigned boot loaders must boot: libvirt must not pick a Secure Boot firmware.
  std::map<std::string, std::string> features;
  for (auto feature : os.child("firmware").children("feature")) {
    features[feature.attribute("name").value()] = feature.attribute("enabled").value();
  }
  CHECK(features ==
        std::map<std::string, std::string>{{"enrolled-keys", "no"}, {"secure-boot", "no"}});
  CHECK(std::string(os.child("type").attribute("arch").value()) == "aarch64");
  CHECK(std::string(os.child("type").attribute("machine").value()) == "virt");
  CHECK(std::string(document.child("domain").child("cpu").attribute("mode").value()) == "maximum");
}

TEST_CASE("hostile tag values are escaped and read back literally", "[xml]") {
  const std::vector<std::string> hostile = {
      "<script>alert(1)</script>", "a & b",    "'; rm -rf / #",       "\"quoted\"", "]]><x/>",
      "../../etc/passwd",          "ümlaut ✓", std::string(5000, 'x')};
  auto spec = sample_spec();
  for (std::size_t i = 0; i < hostile.size(); ++i) {
    spec.tags.set("value-" + std::to_string(i), hostile[i]);
  }
  spec.smbios_serial = "ds=nocloud-net;s=http://10.0.0.1:8775/<&>/";
  const auto xml = render_domain_xml(spec, VirtType::test);
  const auto document = parse(xml);
  const auto instance = document.child("domain").child("metadata").first_child();
  std::ostringstream metadata;
  instance.print(metadata);
  const auto tags = parse_tags_metadata(metadata.str());
  for (std::size_t i = 0; i < hostile.size(); ++i) {
    CHECK(tags.get("value-" + std::to_string(i)) == std::optional<std::string_view>(hostile[i]));
  }
  CHECK(xml.find("<script>") == std::string::npos);
  CHECK(
      std::string(
          document.child("domain").child("sysinfo").child("system").child("entry").text().get()) ==
      spec.smbios_serial);
}

TEST_CASE("values XML cannot carry are refused, not mangled", "[xml]") {
  auto spec = sample_spec();
  SECTION("control character in a tag value") {
    spec.tags.set("pool-id", "a\x01b");
  }
  SECTION("invalid UTF-8 in a tag value") {
    spec.tags.set("pool-id", "\xff\xfe");
  }
  SECTION("a tag key that is not an XML name") {
    spec.tags.set("bad key><x", "v");
  }
  SECTION("a relative disk path") {
    spec.disk_path = "images/x.qcow2";
  }
  SECTION("a malformed MAC") {
    spec.interfaces[0].mac = "52:54:00:12:34:5g\"/><x";
  }
  SECTION("a name with a slash") {
    spec.name = "a/b";
  }
  SECTION("a name with a space") {
    spec.name = "a b";
  }
  SECTION("a tag value of only spaces, which libvirt may not give back") {
    spec.tags.set("pool-id", "   ");
  }
  CHECK_THROWS_MATCHES(render_domain_xml(spec, VirtType::test), HypervisorError,
                       Catch::Predicate<HypervisorError>([](const HypervisorError& e) {
                         return e.kind() == HypervisorError::Kind::invalid_argument;
                       }));
}

TEST_CASE("overlay volume XML names its backing store and format", "[xml]") {
  const auto xml =
      render_overlay_volume_xml({.pool = "default",
                                 .name = "x.qcow2",
                                 .capacity_bytes = 20ULL << 30U,
                                 .backing_path = "/var/lib/garm-edge/images/base.qcow2",
                                 .backing_format = "qcow2"});
  const auto document = parse(xml);
  const auto volume = document.child("volume");
  CHECK(std::string(volume.child("capacity").text().get()) == "21474836480");
  CHECK(std::string(volume.child("target").child("format").attribute("type").value()) == "qcow2");
  CHECK(std::string(volume.child("backingStore").child("path").text().get()) ==
        "/var/lib/garm-edge/images/base.qcow2");
  CHECK(std::string(volume.child("backingStore").child("format").attribute("type").value()) ==
        "qcow2");
  CHECK_THROWS_AS(render_overlay_volume_xml({.pool = "p",
                                             .name = "../x",
                                             .capacity_bytes = 1,
                                             .backing_path = "/b",
                                             .backing_format = "qcow2"}),
                  HypervisorError);
}

TEST_CASE("a guest that may be saved gets a generation ID device, x86_64 only", "[xml]") {
  auto spec = sample_spec();
  CHECK(parse(render_domain_xml(spec, VirtType::kvm)).child("domain").child("genid").empty());
  spec.generation_id = true;
  const auto document = parse(render_domain_xml(spec, VirtType::kvm));
  const auto genid = document.child("domain").child("genid");
  REQUIRE_FALSE(genid.empty());
  CHECK(std::string(genid.text().get()).empty());  // libvirt picks it, anew on every restore
  spec.arch = GuestArch::aarch64;                  // QEMU's vmgenid device is x86's
  CHECK(parse(render_domain_xml(spec, VirtType::qemu)).child("domain").child("genid").empty());
}

TEST_CASE("a memory state volume is raw, and no other format passes", "[xml]") {
  hypervisor::VolumeSpec spec{.pool = "default",
                              .name = "x.memory",
                              .capacity_bytes = 0,
                              .backing_path = "",
                              .backing_format = "",
                              .format = "raw"};
  const auto document = parse(render_overlay_volume_xml(spec));
  CHECK(std::string(
            document.child("volume").child("target").child("format").attribute("type").value()) ==
        "raw");
  CHECK(document.child("volume").child("backingStore").empty());
  spec.format = "raw'/><x";
  CHECK_THROWS_AS(render_overlay_volume_xml(spec), HypervisorError);
}

TEST_CASE("metadata from libvirt is read with or without our prefix", "[xml]") {
  const auto tags = parse_tags_metadata(
      "<instance>\n  <pool-id>p1</pool-id>\n  <agent-id>a</agent-id>\n</instance>");
  CHECK(tags.get("pool-id") == std::optional<std::string_view>("p1"));
  CHECK(tags.matches(Tags{{"agent-id", "a"}}));
  CHECK_FALSE(tags.matches(Tags{{"agent-id", "b"}}));
  CHECK_FALSE(tags.matches(Tags{{"missing", "a"}}));
  CHECK(
      parse_disk_paths("<domain><devices><disk device='cdrom'><source file='/iso'/></disk>"
                       "<disk device='disk'><source file='/a.qcow2'/></disk></devices></domain>") ==
      std::vector<std::string>{"/a.qcow2"});
}

TEST_CASE("guests get no USB controller, balloon or NIC boot ROM", "[xml]") {
  for (auto virt_type : {VirtType::kvm, VirtType::qemu}) {
    const auto document = parse(render_domain_xml(sample_spec(), virt_type));
    const auto devices = document.child("domain").child("devices");
    const auto usb = devices.find_child_by_attribute("controller", "type", "usb");
    CHECK(std::string(usb.attribute("model").value()) == "none");
    CHECK(std::string(devices.child("memballoon").attribute("model").value()) == "none");
    CHECK(std::string(devices.child("interface").child("rom").attribute("enabled").value()) ==
          "no");
  }
}

TEST_CASE("extra disks follow the root disk as vdb, vdc, ... with their serials", "[xml]") {
  auto spec = sample_spec();
  spec.extra_disks = {
      {.path = "/pool/a.docker.cache", .format = "qcow2", .serial = "garm-cache-0"},
      {.path = "/caches/status-1.raw", .format = "raw", .serial = "garm-refresh-status"}};
  const auto document = parse(render_domain_xml(spec, VirtType::kvm));
  std::vector<std::string> seen;
  for (const auto disk : document.child("domain").child("devices").children("disk")) {
    seen.push_back(std::string(disk.child("target").attribute("dev").value()) + " " +
                   disk.child("driver").attribute("type").value() + " " +
                   disk.child("source").attribute("file").value() + " " +
                   disk.child("serial").text().get());
  }
  CHECK(seen == std::vector<std::string>{
                    "vda qcow2 /var/lib/libvirt/images/garm-edge-9dcf590a-garm-abc.qcow2 ",
                    "vdb qcow2 /pool/a.docker.cache garm-cache-0",
                    "vdc raw /caches/status-1.raw garm-refresh-status"});
  spec.extra_disks = {{.path = "/x.qcow2", .format = "qcow2", .serial = "a-serial-past-20-bytes"}};
  CHECK_THROWS_AS(render_domain_xml(spec, VirtType::kvm), HypervisorError);
  spec.extra_disks = {{.path = "relative.qcow2", .format = "qcow2", .serial = "ok"}};
  CHECK_THROWS_AS(render_domain_xml(spec, VirtType::kvm), HypervisorError);
}

TEST_CASE("x86 KVM guests see no VMX or SVM unless their pool asks for nested virtualization",
          "[xml][shapes]") {
  auto spec = sample_spec();
  const auto disabled = [](const DomainSpec& s, VirtType type) {
    std::map<std::string, std::string> features;
    const auto document = parse(render_domain_xml(s, type));
    for (auto feature : document.child("domain").child("cpu").children("feature")) {
      features[feature.attribute("name").value()] = feature.attribute("policy").value();
    }
    return features;
  };
  const std::map<std::string, std::string> hidden{{"svm", "disable"}, {"vmx", "disable"}};
  CHECK(disabled(spec, VirtType::kvm) == hidden);
  CHECK(disabled(spec, VirtType::qemu).empty());  // emulated: its hypervisor runs in QEMU
  spec.nested_virtualization = true;
  CHECK(disabled(spec, VirtType::kvm).empty());
  spec.nested_virtualization = false;
  spec.arch = GuestArch::aarch64;  // no such features to hide
  CHECK(disabled(spec, VirtType::kvm).empty());
}

TEST_CASE("a further NIC on a host bridge, and a bridge with a network is refused",
          "[xml][shapes]") {
  auto spec = sample_spec();
  spec.interfaces.push_back({.network = "",
                             .bridge = "br-lan",
                             .mac = "52:54:00:aa:bb:cc",
                             .filter = "",
                             .filter_ip = ""});
  const auto document = parse(render_domain_xml(spec, VirtType::kvm));
  const auto nics = document.child("domain").child("devices").children("interface");
  std::vector<std::string> sources;
  for (auto nic : nics) {
    sources.push_back(std::string(nic.attribute("type").value()) + ":" +
                      nic.child("source").attribute("network").value() +
                      nic.child("source").attribute("bridge").value());
  }
  CHECK(sources == std::vector<std::string>{"network:default", "bridge:br-lan"});
  spec.interfaces.back().network = "default";
  CHECK_THROWS_AS(render_domain_xml(spec, VirtType::kvm), HypervisorError);
}

TEST_CASE("a volume without a backing store is an empty disk", "[xml][shapes]") {
  const auto xml = render_overlay_volume_xml({.pool = "nvme",
                                              .name = "d.0.scratch",
                                              .capacity_bytes = 1ULL << 30U,
                                              .backing_path = "",
                                              .backing_format = "qcow2"});
  const auto document = parse(xml);
  const auto volume = document.child("volume");
  CHECK(std::string(volume.child("capacity").text().get()) == std::to_string(1ULL << 30U));
  CHECK_FALSE(volume.child("backingStore"));
}
