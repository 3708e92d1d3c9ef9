#include "agent/base/config.hpp"

#include <cctype>

#include <catch2/catch.hpp>
#include <toml++/toml.h>

#include "common/toml_guard.hpp"

using namespace garm_edge::agent;

namespace {

constexpr const char* kValid = R"(
[agent]
id = "rack1-host3"
state_dir = "/var/lib/garm-edge"
max_concurrent_creates = 4
reconcile_interval_seconds = 30

[libvirt]
uri = "qemu:///system"
virt_type = "qemu"
call_timeout_seconds = 20
storage_pool = "default"
network = "garm"

[[images]]
name = "debian-12"
base_volume = "debian-12.qcow2"
os_type = "linux"
os_name = "debian"
os_version = "12"
arch = "amd64"

[[images]]
name = "ubuntu-24.04-arm"
base_path = "/var/lib/garm-edge/images/noble-arm64.qcow2"
arch = "arm64"

[[flavors]]
name = "small"
vcpus = 2
memory_mib = 2048
disk_gib = 20
)";

std::string error_for(const std::string& text) {
  try {
    parse_agent_config(text, "agent.toml");
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

std::string with(const std::string& extra) {
  return std::string(kValid) + extra;
}

}  // namespace

TEST_CASE("a complete config parses into typed values", "[config]") {
  const auto config = parse_agent_config(kValid, "agent.toml");
  CHECK(config.agent_id == "rack1-host3");
  CHECK(config.max_concurrent_creates == 4);
  CHECK(config.reconcile_interval == std::chrono::seconds(30));
  CHECK(config.libvirt.uri == "qemu:///system");
  CHECK(config.libvirt.virt_type == garm_edge::hypervisor::VirtType::qemu);
  CHECK(config.libvirt.call_timeout == std::chrono::seconds(20));
  CHECK(config.network == "garm");
  REQUIRE(config.find_image("ubuntu-24.04-arm") != nullptr);
  CHECK(config.find_image("ubuntu-24.04-arm")->arch == garm_edge::wire::OsArch::arm64);
  CHECK(config.find_flavor("small")->memory_mib == 2048);
  CHECK(config.find_flavor("large") == nullptr);
}

TEST_CASE("config errors say where and what", "[config]") {
  CHECK_THAT(error_for(with("[oops]\n")),
             Catch::Contains("agent.toml:") && Catch::Contains("unknown key \"oops\""));
  CHECK_THAT(error_for(std::string(kValid).replace(std::string(kValid).find("virt_type = \"qemu\""),
                                                   18, "virt_type = \"xen\"")),
             Catch::Contains("agent.toml:10:") && Catch::Contains("virt_type must be one of"));
  CHECK_THAT(error_for(with("[[flavors]]\nname = \"small\"\n")),
             Catch::Contains("\"small\" is defined twice"));
  CHECK_THAT(error_for(with("[[flavors]]\nname = \"big\"\nvcpus = 0\n")),
             Catch::Contains("vcpus must be between 1 and 512"));
  CHECK_THAT(error_for(with("[[flavors]]\nname = \"big\"\nmemory = 4\n")),
             Catch::Contains("unknown key \"memory\""));
  CHECK_THAT(error_for(with("[[images]]\nname = \"../etc\"\nbase_path = \"/x\"\n")),
             Catch::Contains("[[images]] #3") && Catch::Contains("name"));
  CHECK_THAT(
      error_for(with("[[images]]\nname = \"both\"\nbase_path = \"/x\"\nbase_volume = \"y\"\n")),
      Catch::Contains("has both base_volume and base_path"));
  CHECK_THAT(error_for(with("[[images]]\nname = \"rel\"\nbase_path = \"x.qcow2\"\n")),
             Catch::Contains("base_path must be an absolute path"));
  CHECK_THAT(error_for(with("[[images]]\nname = \"none\"\n")),
             Catch::Contains("needs a base_volume, a base_path or a source"));
  const std::string pulled = "[[images]]\nname = \"pulled\"\n";
  CHECK_THAT(error_for(with(pulled + "source = \"https://i.example/d.qcow2\"\n")),
             Catch::Contains("exactly one of sha256 or checksums"));
  CHECK_THAT(error_for(with(pulled + "source = \"ftp://i.example/d.qcow2\"\nsha256 = \"" +
                            std::string(64, 'a') + "\"\n")),
             Catch::Contains("source must be an https:// or http:// URL"));
  CHECK_THAT(error_for(with(pulled + "source = \"https://i.example/d.qcow2\"\nsha256 = \"" +
                            std::string(64, 'A') + "\"\n")),
             Catch::Contains("sha256 must be 64 lower-case hex digits"));
  CHECK_THAT(
      error_for(with(pulled + "base_path = \"/x\"\nsha256 = \"" + std::string(64, 'a') + "\"\n")),
      Catch::Contains("belong to a source"));
  CHECK_THAT(error_for(with("[pull]\nhttps_proxy = \"socks5://p:1080\"\n")),
             Catch::Contains("https_proxy"));
  CHECK_THAT(error_for("[agent]\nid = \"a\"\n"), Catch::Contains("at least one [[images]]"));
  CHECK_THAT(error_for("[agent\n"), Catch::Contains("agent.toml:1:"));
  CHECK_THAT(error_for(with("[agent.extra]\n")), Catch::Contains("agent.toml"));
}

TEST_CASE("a missing config file is a clear error", "[config]") {
  CHECK_THROWS_WITH(load_agent_config("/nonexistent/agent.toml"),
                    Catch::Contains("/nonexistent/agent.toml: cannot open"));
}

TEST_CASE("the documented example config (the package's default) is valid", "[config]") {
  const auto config = load_agent_config(GARM_EDGE_SOURCE_DIR "/docs/agent.toml.example");
  CHECK_FALSE(config.agent_id.empty());  // the host name by default
  CHECK(config.guests.enabled);
  CHECK(config.api.allows({"garm"}, "9dcf590a-1192-4a9c-b3e4-e0902974c2c0"));
  CHECK(config.find_image("debian-12") != nullptr);
  CHECK(config.find_flavor("small") != nullptr);
  // The example shows the built-in defaults where it sets them.
  CHECK(config.guests.address_quarantine == GuestConfig{}.address_quarantine);
}

TEST_CASE("a [guests] section turns the guest service on", "[config]") {
  const auto config = parse_agent_config(with(R"(
[guests]
address = "192.168.122.1"
port = 8775
mode = "direct"
addresses = "192.168.122.10-192.168.122.99"
anti_spoofing = "source-ip"
relay_timeout_seconds = 15
)"),
                                         "agent.toml");
  CHECK(config.guests.enabled);
  CHECK(config.guests.address == "192.168.122.1");
  CHECK_FALSE(config.guests.relay);
  CHECK(config.guests.anti_spoofing == AntiSpoofing::source_ip);
  CHECK(config.guests.relay_timeout == std::chrono::seconds(15));
  // Long enough for the guest service to forget an address's misses (60 s), no longer.
  CHECK(config.guests.address_quarantine == std::chrono::seconds(60));
  CHECK(parse_agent_config(with("[guests]\naddress_quarantine_seconds = 0\n"), "agent.toml")
            .guests.address_quarantine == std::chrono::seconds(0));
  CHECK_FALSE(parse_agent_config(kValid, "agent.toml").guests.enabled);
  CHECK_THAT(error_for(with("[guests]\nmode = \"proxy\"\n")), Catch::Contains("relay or direct"));
  CHECK_THAT(error_for(with("[guests]\nanti_spoofing = \"maybe\"\n")),
             Catch::Contains("anti_spoofing"));
  CHECK_THAT(error_for(with("[guests]\nsecret = 1\n")), Catch::Contains("unknown key"));
}

TEST_CASE("characters toml++ 3.3 cannot classify are refused wherever they are", "[config]") {
  // toml++ reaches __builtin_unreachable on these when it scans for whitespace (fuzzing).
  const std::string in_comment = with("# Caf\xc3\xa9 rack\n");
  CHECK_THAT(error_for(in_comment), Catch::Contains("U+00E9") && Catch::Contains("\\u00E9"));
  CHECK_THAT(error_for(std::string("\n\n[agent]\nid = \"a\" \xc8\x9b\n")),
             Catch::Contains("agent.toml:4: character U+021B"));
  // Written as an escape, the same character is an ordinary string value.
  const auto config = parse_agent_config(
      with("[[images]]\nname = \"x\"\nbase_volume = \"x.qcow2\"\nos_name = \"caf\\u00E9\"\n"),
      "agent.toml");
  CHECK(config.images.back().os_name == "caf\xc3\xa9");
  // Characters toml++ does classify, and a byte order mark, pass through to it.
  CHECK_NOTHROW(parse_agent_config(
      "\xef\xbb\xbf# \xe4\xb8\xad \xf0\x9f\x98\x80\n" + std::string(kValid), "agent.toml"));
}

TEST_CASE("the refused set is exactly where toml++ 3.3's whitespace table has no answer",
          "[config]") {
  using garm_edge::toml_plusplus_cannot_classify;
  const auto unicode_horizontal_space = [](char32_t c) {
    return c == 0xA0 || c == 0x1680 || c == 0x180E || (c >= 0x2000 && c <= 0x200B) || c == 0x202F ||
           c == 0x205F || c == 0x2060 || c == 0x3000 || c == 0xFEFF;
  };
  std::size_t refused = 0;
  for (char32_t c = 0x80; c <= 0x10FFFF; ++c) {
    if (toml_plusplus_cannot_classify(c)) {
      ++refused;
      continue;
    }
    // In the UBSan tier a code point missing from the set fails here as "unreachable".
    if (toml::impl::is_non_ascii_horizontal_whitespace(c) != unicode_horizontal_space(c)) {
      FAIL("toml++ classifies U+" << std::hex << static_cast<unsigned>(c) << " unexpectedly");
    }
  }
  CHECK(refused == (0x499 - 0xA1 + 1) + (0x3057 - 0x2C5E + 1 - 1) + (0xFEFE - 0xFB26 + 1));
  CHECK(garm_edge::find_unreadable_toml_character("a = \"\xc2\xa1\"")->code_point == 0xA1);
  CHECK_FALSE(garm_edge::find_unreadable_toml_character("a = \"\xc2\xa0\xe3\x80\x80\""));
}

TEST_CASE("[api] allow takes addresses and CIDR ranges, and refuses anything else", "[config]") {
  const std::string api = R"(
[api]
ca = "/etc/garm-edge/pki/ca.crt"
certificate = "/etc/garm-edge/pki/agent.crt"
key = "/etc/garm-edge/pki/agent.key"
[[api.clients]]
identity = "garm"
controllers = ["*"]
)";
  const auto allowing = [&](const std::string& list) {
    return with(api).replace(with(api).find("[[api.clients]]"), 0, "allow = " + list + "\n");
  };
  const auto config =
      parse_agent_config(allowing(R"(["10.0.0.5", "192.0.2.0/24", "2001:db8::/32"])"), "a.toml");
  REQUIRE(config.api.allow.size() == 3);
  CHECK(config.api.allow[0].contains(asio::ip::make_address("10.0.0.5")));
  CHECK_FALSE(config.api.allow[0].contains(asio::ip::make_address("10.0.0.6")));
  CHECK(config.api.allow[1].contains(asio::ip::make_address("::ffff:192.0.2.77")));  // dual stack
  CHECK(config.api.allow[2].contains(asio::ip::make_address("2001:db8:1::9")));
  CHECK(parse_agent_config(with(api), "a.toml").api.allow.empty());  // left out: everyone
  CHECK_THAT(error_for(allowing(R"(["10.0.0.1/24"])")), Catch::Contains("host bits set"));
  CHECK_THAT(error_for(allowing(R"(["10.0.0.0/33"])")), Catch::Contains("no valid prefix"));
  CHECK_THAT(error_for(allowing(R"(["garm.example"])")), Catch::Contains("not an address"));
  CHECK_THAT(error_for(allowing("[]")), Catch::Contains("non-empty list"));
}

namespace {

constexpr const char* kControllerA = "9dcf590a-1192-4a9c-b3e4-e0902974c2c0";
constexpr const char* kControllerB = "5a3e2b1c-0d9f-4e8a-b7c6-d5e4f3a2b1c0";

/// kValid with the guest service, the API with `clients` ([[api.clients]] tables) and `warm`.
std::string with_clients_and_warm(const std::string& clients, const std::string& warm) {
  return with(
      "[guests]\n[api]\nca = \"/pki/ca.crt\"\ncertificate = \"/pki/a.crt\"\n"
      "key = \"/pki/a.key\"\n" +
      clients + warm);
}

std::string client(const std::string& identity, const std::string& controllers) {
  return "[[api.clients]]\nidentity = \"" + identity + "\"\ncontrollers = [" + controllers + "]\n";
}

std::string warm_entry(const std::string& extra = "") {
  return "[[warm]]\nimage = \"debian-12\"\nflavor = \"small\"\n" + extra;
}

std::string ascii_upper(std::string text) {
  for (auto& c : text) {
    c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  }
  return text;
}

std::string quoted(const std::string& text) {
  return "\"" + text + "\"";
}

}  // namespace

TEST_CASE("warm guests belong to one controller, which an agent serving several must name",
          "[config][warm]") {
  const auto one = client("garm", quoted(kControllerA));
  SECTION("an agent serving one controller: its warm guests are that controller's") {
    const auto config = parse_agent_config(
        with_clients_and_warm(one + client("garm-standby", quoted(kControllerA)), warm_entry()),
        "agent.toml");
    REQUIRE(config.warm.size() == 1);
    CHECK(config.warm.front().controller == kControllerA);
  }
  SECTION("an agent serving more than one controller refuses a [[warm]] without controller") {
    const std::string refused = "controller is required";
    CHECK_THAT(
        error_for(with_clients_and_warm(one + client("other", quoted(kControllerB)), warm_entry())),
        Catch::Contains("[[warm]] #1") && Catch::Contains(refused));
    CHECK_THAT(
        error_for(with_clients_and_warm(
            client("garm", quoted(kControllerA) + ", " + quoted(kControllerB)), warm_entry())),
        Catch::Contains(refused));
    CHECK_THAT(error_for(with_clients_and_warm(client("operator", "\"*\""), warm_entry())),
               Catch::Contains(refused));
    CHECK_THAT(error_for(with("[guests]\n" + warm_entry())), Catch::Contains(refused));
  }
  SECTION("named, the controller is one a client may act for, and entries are per controller") {
    const auto both = client("garm", quoted(kControllerA)) + client("other", quoted(kControllerB));
    const auto config = parse_agent_config(
        with_clients_and_warm(both, warm_entry("controller = " + quoted(kControllerA) + "\n") +
                                        warm_entry("controller = " + quoted(kControllerB) + "\n")),
        "agent.toml");
    REQUIRE(config.warm.size() == 2);
    CHECK(config.warm.at(0).controller == kControllerA);
    CHECK(config.warm.at(1).controller == kControllerB);
    CHECK(config.warm.at(0).name != config.warm.at(1).name);
    CHECK(parse_agent_config(
              with_clients_and_warm(client("operator", "\"*\""),
                                    warm_entry("controller = " + quoted(kControllerB) + "\n")),
              "agent.toml")
              .warm.front()
              .controller == kControllerB);
    CHECK_THAT(error_for(with_clients_and_warm(
                   one, warm_entry("controller = " + quoted(kControllerB) + "\n"))),
               Catch::Contains("not one any [[api.clients]] entry may act for: warm guests would "
                               "never be used"));
    CHECK_THAT(error_for(with_clients_and_warm(one, warm_entry("controller = \"garm\"\n"))),
               Catch::Contains("controller must be a garm controller's UUID"));
    CHECK_THAT(error_for(with_clients_and_warm(one, warm_entry() + warm_entry())),
               Catch::Contains("is defined twice"));
  }
  SECTION("controller IDs written in upper case are garm's lower-case ones") {
    const auto upper = ascii_upper(kControllerA);
    const auto config = parse_agent_config(
        with_clients_and_warm(client("garm", quoted(upper)) + client("other", quoted(kControllerB)),
                              warm_entry("controller = " + quoted(upper) + "\n")),
        "agent.toml");
    CHECK(config.api.clients.at(0).controllers.at(0) == kControllerA);
    REQUIRE(config.warm.size() == 1);
    CHECK(config.warm.front().controller == kControllerA);  // would never match garm's
    CHECK(config.api.allows({"garm"}, kControllerA));
  }
}

TEST_CASE("a checksum file over plain HTTP proves nothing and is refused", "[config][images]") {
  CHECK_THROWS_WITH(
      parse_agent_config(with("[pull]\ndirectory = \"/var/lib/images\"\n[[images]]\n"
                              "name = \"bookworm\"\nsource = \"http://mirror.lab/debian.qcow2\"\n"
                              "checksums = \"http://mirror.lab/SHA256SUMS\"\n"),
                         "agent.toml"),
      Catch::Contains("checksums must be an https:// URL"));
  // An image over HTTP with its digest pinned in the config is proved by the config.
  CHECK_NOTHROW(parse_agent_config(
      with("[pull]\ndirectory = \"/var/lib/images\"\n[[images]]\nname = \"bookworm\"\n"
           "source = \"http://mirror.lab/debian.qcow2\"\nsha256 = \"" +
           std::string(64, 'a') + "\"\n"),
      "agent.toml"));
}

TEST_CASE("an image can name a source to pull, proved by a checksum file", "[config][images]") {
  const auto config = parse_agent_config(
      with("[pull]\ndirectory = \"/var/lib/images\"\nquota_gib = 40\nrate_mib_per_second = 5\n"
           "https_proxy = \"http://proxy:3128\"\n"
           "[[images]]\nname = \"bookworm\"\n"
           "source = \"https://cloud.debian.org/images/latest/debian-12-nocloud-amd64.raw.xz\"\n"
           "checksums = \"https://cloud.debian.org/images/latest/SHA512SUMS\"\n"),
      "agent.toml");
  const auto* image = config.find_image("bookworm");
  REQUIRE(image != nullptr);
  REQUIRE(image->source);
  CHECK(image->source->file_name() == "debian-12-nocloud-amd64.raw.xz");
  CHECK(image->source->xz);
  CHECK(image->source->format == "raw");
  CHECK(image->base_path.empty());
  CHECK(config.pull.directory == "/var/lib/images");
  CHECK(config.pull.quota_bytes == std::uint64_t{40} << 30U);
  CHECK(config.pull.bytes_per_second == std::uint64_t{5} << 20U);
  CHECK(config.pull.proxies.https_proxy == "http://proxy:3128");
}

TEST_CASE("what pools may ask beyond their flavor: limits, scratch pools and further networks",
          "[config][shapes]") {
  const auto config = parse_agent_config(with(R"(
[capacity]
disk_gib = 2000
[extra_specs]
max_root_disk_gib = 100
nested_virtualization = true
[[scratch_pools]]
name = "nvme"
storage_pool = "nvme0"
max_disk_gib = 200
[[networks]]
name = "lab"
bridge = "br-lab"
controllers = ["9DCF590A-1192-4A9C-B3E4-E0902974C2C0"]
)"),
                                         "agent.toml");
  CHECK(config.capacity.disk_gib == 2000);
  CHECK(config.extra_specs.max_root_disk_gib == 100);
  CHECK(config.extra_specs.nested_virtualization);
  REQUIRE(config.find_scratch_pool("nvme") != nullptr);
  CHECK(config.find_scratch_pool("nvme")->storage_pool == "nvme0");
  CHECK(config.find_scratch_pool("nvme")->scope.serves("any-controller"));
  REQUIRE(config.find_network("lab") != nullptr);
  CHECK(config.find_network("lab")->bridge == "br-lab");
  CHECK(config.find_network("lab")->scope.serves("9dcf590a-1192-4a9c-b3e4-e0902974c2c0"));
  CHECK_FALSE(config.find_network("lab")->scope.serves("5a3e2b1c-0d9f-4e8a-b7c6-d5e4f3a2b1c0"));
  // Defaults: no pool grows its root, nobody gets nested virtualization.
  const auto plain = parse_agent_config(kValid, "agent.toml");
  CHECK(plain.extra_specs.max_root_disk_gib == 0);
  CHECK_FALSE(plain.extra_specs.nested_virtualization);

  CHECK_THAT(error_for(with("[[networks]]\nname = \"lab\"\n")),
             Catch::Contains("exactly one of network"));
  CHECK_THAT(error_for(with("[[networks]]\nname = \"lab\"\nnetwork = \"a\"\nbridge = \"b\"\n")),
             Catch::Contains("exactly one of network"));
  CHECK_THAT(error_for(with("[[networks]]\nname = \"Lab Net\"\nnetwork = \"a\"\n")),
             Catch::Contains("name must be 1 to 24"));
  // The guests' own network again, as a further NIC: it would carry no anti-spoofing filter.
  CHECK_THAT(error_for(with("[[networks]]\nname = \"lab\"\nnetwork = \"garm\"\n")),
             Catch::Contains("names the guests' own network garm"));
  CHECK_THAT(error_for(with("[[scratch_pools]]\nname = \"nvme\"\n")),
             Catch::Contains("storage_pool"));
  CHECK_THAT(error_for(with("[[scratch_pools]]\nname = \"n\"\nstorage_pool = \"p\"\n"
                            "controllers = [\"not-a-uuid\"]\n")),
             Catch::Contains("controller's UUID"));
  CHECK_THAT(error_for(with("[[scratch_pools]]\nname = \"n\"\nstorage_pool = \"p\"\n"
                            "[[scratch_pools]]\nname = \"n\"\nstorage_pool = \"q\"\n")),
             Catch::Contains("defined twice"));
}

TEST_CASE("quotas and headroom: read as written, and what cannot be meant is refused",
          "[config][shares]") {
  const auto config = parse_agent_config(with(R"(
[[quotas]]
controller = "AAAAAAAA-0000-4000-8000-000000000001"
max_instances = 3
max_vcpus = 12
reserved_instances = 1
max_priority = "normal"

[[quotas]]
controller = "bbbbbbbb-0000-4000-8000-000000000002"
reserved_vcpus = 4

[headroom]
low = { instances = 2, memory_mib = 4096 }
normal = { instances = 1 }
)"),
                                         "agent.toml");
  REQUIRE(config.shares.quotas.size() == 2);
  const auto* a = config.shares.find("aaaaaaaa-0000-4000-8000-000000000001");  // lower case
  REQUIRE(a != nullptr);
  CHECK(a->max == ShareAmount{.instances = 3, .vcpus = 12, .memory_mib = 0, .disk_gib = 0});
  CHECK(a->reserved.instances == 1);
  CHECK(a->max_priority == garm_edge::wire::Priority::normal);
  CHECK(config.shares.quotas[1].max_priority == garm_edge::wire::Priority::high);
  CHECK(config.shares.headroom_of(garm_edge::wire::Priority::low) ==
        ShareAmount{.instances = 2, .vcpus = 0, .memory_mib = 4096, .disk_gib = 0});
  CHECK(config.shares.headroom_of(garm_edge::wire::Priority::high) == ShareAmount{});

  const std::string quota = "[[quotas]]\ncontroller = \"aaaaaaaa-0000-4000-8000-000000000001\"\n";
  CHECK_THAT(error_for(with(quota + "max_instances = 2\nreserved_instances = 3\n")),
             Catch::Contains("reserved_instances is more than max_instances"));
  CHECK_THAT(error_for(with(quota + quota)),
             Catch::Contains("names controller") && Catch::Contains("twice"));
  CHECK_THAT(error_for(with("[[quotas]]\ncontroller = \"team-a\"\n")),
             Catch::Contains("controller must be a garm controller's UUID"));
  CHECK_THAT(error_for(with(quota + "max_priority = \"urgent\"\n")),
             Catch::Contains("max_priority"));
  CHECK_THAT(error_for(with(quota + "max_jobs = 3\n")), Catch::Contains("max_jobs"));
  CHECK_THAT(error_for(with("[headroom]\nlow = { instances = 1 }\nnormal = { instances = 2 }\n")),
             Catch::Contains("normal.instances is more than low.instances"));
  CHECK_THAT(error_for(with("[headroom]\nnormal = { vcpus = 2 }\n")),
             Catch::Contains("normal.vcpus is more than low.vcpus"));
  CHECK_THAT(error_for(with("[headroom]\nhigh = { instances = 1 }\n")), Catch::Contains("high"));
}
