// Guest identity pieces that need no host: network XML, address ranges, the token index,
// the miss limiter, tokens and hashes.

#include "agent/guests/guest_network.hpp"

#include <set>

#include <catch2/catch.hpp>

#include "agent/base/clock.hpp"
#include "agent/guests/guest_index.hpp"
#include "agent/guests/guest_service.hpp"
#include "common/text.hpp"
#include "hypervisor/domain_xml.hpp"
#include "hypervisor/network_xml.hpp"
#include "net/secret_token.hpp"

using namespace garm_edge;
using namespace garm_edge::agent;

namespace {

constexpr const char* kNatNetwork = R"(<network>
  <name>default</name>
  <forward mode='nat'/>
  <bridge name='virbr0' stp='on' delay='0'/>
  <ip address='192.168.122.1' netmask='255.255.255.0'>
    <dhcp>
      <range start='192.168.122.100' end='192.168.122.254'/>
      <host mac='52:54:00:aa:bb:01' ip='192.168.122.10'/>
    </dhcp>
  </ip>
  <ip family='ipv6' address='fd00::1' prefix='64'/>
</network>)";

class FixedClock final : public Clock {
 public:
  std::chrono::system_clock::time_point now() const override { return time; }
  std::chrono::system_clock::time_point time{std::chrono::seconds(1'800'000'000)};
};

InstanceRecord record_with_guest(const std::string& name, const std::string& ip,
                                 const std::string& seed_token) {
  InstanceRecord record;
  record.domain_name = name;
  record.guest = GuestRecord{};
  record.guest->ip = ip;
  record.guest->seed_token_hash = net::sha256_hex(seed_token);
  record.guest->bearer_token_hash = net::sha256_hex("bearer-" + seed_token);
  return record;
}

}  // namespace

TEST_CASE("a libvirt network's IPv4 side is read from its XML", "[guests]") {
  const auto info = hypervisor::parse_network_xml(kNatNetwork);
  CHECK(info.name == "default");
  CHECK(info.forward_mode == "nat");
  CHECK(info.bridge == "virbr0");
  CHECK(info.gateway == "192.168.122.1");
  CHECK(info.prefix == 24);
  REQUIRE(info.ranges.size() == 1);
  CHECK(info.ranges[0].start == "192.168.122.100");
  REQUIRE(info.hosts.size() == 1);
  CHECK(info.hosts[0] == hypervisor::DhcpHost{.mac = "52:54:00:aa:bb:01", .ip = "192.168.122.10"});
}

TEST_CASE("reservable addresses avoid the gateway and dnsmasq's own range", "[guests]") {
  const auto info = hypervisor::parse_network_xml(kNatNetwork);
  const auto range = reservable_addresses(info, "");
  CHECK(format_ipv4(range.first) == "192.168.122.2");
  CHECK(format_ipv4(range.last) == "192.168.122.99");

  const auto configured = reservable_addresses(info, "192.168.122.20-192.168.122.29");
  CHECK(format_ipv4(configured.first) == "192.168.122.20");
  CHECK(format_ipv4(configured.last) == "192.168.122.29");

  CHECK_THROWS_WITH(reservable_addresses(info, "10.0.0.1-10.0.0.9"),
                    Catch::Contains("not all inside"));
  CHECK_THROWS_WITH(reservable_addresses(info, "192.168.122.30-192.168.122.20"),
                    Catch::Contains("first-last"));
  auto whole = info;
  whole.ranges = {{.start = "192.168.122.2", .end = "192.168.122.254"}};
  CHECK_THROWS_WITH(reservable_addresses(whole, ""), Catch::Contains("whole subnet"));
}

TEST_CASE("the allocator skips reserved, taken and recently released addresses", "[guests]") {
  const auto info = hypervisor::parse_network_xml(kNatNetwork);
  const AddressRange range{.first = *parse_ipv4("192.168.122.9"),
                           .last = *parse_ipv4("192.168.122.13")};
  AddressAllocator allocator(std::chrono::seconds(60));
  // .10 is reserved in the network, .9 is held by an instance whose reservation is pending.
  CHECK(allocator.pick(range, info, {"192.168.122.9"}) == "192.168.122.11");
  allocator.release("192.168.122.11");
  CHECK(allocator.pick(range, info, {"192.168.122.9"}) == "192.168.122.12");
  CHECK_FALSE(allocator.pick(range, info, {"192.168.122.9", "192.168.122.12", "192.168.122.13"}));
  CHECK(random_mac().rfind("52:54:00:", 0) == 0);
  CHECK(hypervisor::is_mac_address(random_mac()));
}

TEST_CASE("a quarantine of zero hands a released address out again at once", "[guests]") {
  const auto info = hypervisor::parse_network_xml(kNatNetwork);
  const AddressRange range{.first = *parse_ipv4("192.168.122.11"),
                           .last = *parse_ipv4("192.168.122.12")};
  AddressAllocator allocator(std::chrono::seconds(0));
  CHECK(allocator.pick(range, info, {}) == "192.168.122.11");
  allocator.release("192.168.122.11");
  CHECK(allocator.pick(range, info, {}) == "192.168.122.11");
}

TEST_CASE("the allocator counts held, resting and free addresses as pick() sees them", "[guests]") {
  const auto info = hypervisor::parse_network_xml(kNatNetwork);
  const AddressRange range{.first = *parse_ipv4("192.168.122.9"),
                           .last = *parse_ipv4("192.168.122.13")};
  AddressAllocator allocator(std::chrono::hours(1));
  // .10 is reserved in the network, .9 chosen by a create whose reservation is pending.
  const std::set<std::string> taken = {"192.168.122.9"};
  CHECK(allocator.count(range, info, taken) ==
        AddressCount{.total = 5, .held = 2, .resting = 0, .free = 3});
  allocator.release("192.168.122.11");
  allocator.release("192.168.122.200");  // outside the range: not the agent's to count
  CHECK(allocator.count(range, info, taken) ==
        AddressCount{.total = 5, .held = 2, .resting = 1, .free = 2});
  // Held again meanwhile (a reservation made by hand): counted once, as held.
  CHECK(allocator.count(range, info, {"192.168.122.9", "192.168.122.11"}) ==
        AddressCount{.total = 5, .held = 3, .resting = 0, .free = 2});
  const std::set<std::string> all_but_resting = {"192.168.122.9", "192.168.122.12",
                                                 "192.168.122.13"};
  CHECK(allocator.count(range, info, all_but_resting) ==
        AddressCount{.total = 5, .held = 4, .resting = 1, .free = 0});
  CHECK_FALSE(allocator.pick(range, info, all_but_resting));

  AddressAllocator no_rest(std::chrono::seconds(0));
  no_rest.release("192.168.122.11");
  CHECK(no_rest.count(range, info, taken).resting == 0);
}

TEST_CASE("every guest at one address gets the same MAC, each address its own", "[guests]") {
  CHECK(mac_for_address(*parse_ipv4("192.168.152.2")) == "52:47:45:a8:98:02");
  CHECK(mac_for_address(*parse_ipv4("10.1.2.3")) == "52:47:45:01:02:03");
  std::set<std::string> macs;
  for (std::uint32_t a = *parse_ipv4("10.0.0.1"); a < *parse_ipv4("10.0.16.0"); ++a) {
    REQUIRE(hypervisor::is_mac_address(mac_for_address(a)));
    macs.insert(mac_for_address(a));
  }
  CHECK(macs.size() == 4095);
}

TEST_CASE("DHCP host and filter XML refuse what is not an address", "[guests]") {
  CHECK(hypervisor::render_dhcp_host_xml({.mac = "52:54:00:00:00:01", .ip = "10.0.0.5"}) ==
        "<host mac=\"52:54:00:00:00:01\" ip=\"10.0.0.5\"/>");
  CHECK_THROWS(hypervisor::render_dhcp_host_xml({.mac = "52:54:00:00:00:01'/>", .ip = "10.0.0.5"}));
  CHECK_THROWS(hypervisor::render_dhcp_host_xml({.mac = "52:54:00:00:00:01", .ip = "10.0.0.256"}));

  hypervisor::DomainSpec spec;
  spec.name = "garm-edge-x";
  spec.disk_path = "/var/lib/x.qcow2";
  spec.interfaces.push_back({.network = "default",
                             .bridge = "",
                             .mac = "52:54:00:00:00:01",
                             .filter = "clean-traffic",
                             .filter_ip = "192.168.122.5"});
  const auto xml = hypervisor::render_domain_xml(spec, hypervisor::VirtType::kvm);
  CHECK_THAT(xml, Catch::Contains("<filterref filter=\"clean-traffic\">"));
  CHECK_THAT(xml, Catch::Contains("<parameter name=\"IP\" value=\"192.168.122.5\" />"));
  const auto filters = hypervisor::render_anti_spoofing_filters("garm-edge-source-ip");
  REQUIRE(filters.size() == 5);
  const auto& top = filters.back();  // defined last: it refers to the others
  CHECK(top.name == "garm-edge-source-ip");
  std::string all;
  for (std::size_t i = 0; i + 1 < filters.size(); ++i) {
    CHECK_THAT(top.xml, Catch::Contains("<filterref filter=\"" + filters[i].name + "\"/>"));
    // Each part lets through only what matches the guest's own MAC or address, then drops.
    CHECK(filters[i].xml.rfind("action=\"drop\"") > filters[i].xml.rfind("action=\"return\""));
    all += filters[i].xml;
  }
  CHECK_THAT(all, Catch::Contains("<mac srcmacaddr=\"$MAC\"/>"));
  CHECK_THAT(all, Catch::Contains("<arp arpsrcmacaddr=\"$MAC\"/>"));
  CHECK_THAT(all, Catch::Contains("<arp arpsrcipaddr=\"$IP\"/>"));
  CHECK_THAT(all, Catch::Contains("<ip srcipaddr=\"$IP\"/>"));
  CHECK(hypervisor::with_filter_uuid(top.xml, "") == top.xml);
  CHECK_THAT(hypervisor::with_filter_uuid(top.xml, "7d7b1ecd-729b-40f5-ba7f-eb8f135fb8b6"),
             Catch::StartsWith("<filter name=\"garm-edge-source-ip\" chain=\"root\"><uuid>"
                               "7d7b1ecd-729b-40f5-ba7f-eb8f135fb8b6</uuid><filterref"));
  // DHCP leaves from 0.0.0.0: the guest must still get its reserved lease.
  CHECK_THAT(all, Catch::Contains("srcipaddr=\"0.0.0.0\" dstipaddr=\"255.255.255.255\" "
                                  "protocol=\"udp\" srcportstart=\"68\" dstportstart=\"67\""));
  spec.interfaces[0].filter_ip = "192.168.122.5\"/><x";
  CHECK_THROWS(hypervisor::render_domain_xml(spec, hypervisor::VirtType::kvm));
}

TEST_CASE("the guest index needs the token and the reserved address to agree", "[guests]") {
  GuestIndex index;
  const auto token_a = net::random_token();
  const auto token_b = net::random_token();
  index.put(record_with_guest("dom-a", "10.0.0.2", token_a));
  index.put(record_with_guest("dom-b", "10.0.0.3", token_b));

  const auto found = index.by_seed_token(net::sha256_hex(token_a), "10.0.0.2");
  REQUIRE(found);
  CHECK(found->domain_name == "dom-a");
  CHECK_FALSE(index.by_seed_token(net::sha256_hex(token_a), "10.0.0.3"));  // B's address
  CHECK_FALSE(index.by_seed_token(net::sha256_hex(token_b), "10.0.0.2"));  // B's token
  CHECK(index.by_bearer_token(net::sha256_hex("bearer-" + token_b), "10.0.0.3"));
  CHECK(index.addresses() == std::set<std::string>{"10.0.0.2", "10.0.0.3"});

  auto closed = record_with_guest("dom-a", "10.0.0.2", token_a);
  closed.guest->closed = true;
  index.put(closed);
  CHECK_FALSE(index.by_seed_token(net::sha256_hex(token_a), "10.0.0.2"));
  index.remove("dom-b");
  CHECK_FALSE(index.by_bearer_token(net::sha256_hex("bearer-" + token_b), "10.0.0.3"));
}

TEST_CASE("tokens are 256 random bits in URL-safe text, hashes are SHA-256", "[guests]") {
  const auto token = net::random_token();
  CHECK(net::looks_like_token(token));
  CHECK(token != net::random_token());
  CHECK_FALSE(net::looks_like_token(token.substr(1)));
  CHECK_FALSE(net::looks_like_token(token.substr(1) + "/"));
  CHECK(net::sha256_hex("abc") ==
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(net::constant_time_equal("same", "same"));
  CHECK_FALSE(net::constant_time_equal("same", "sane"));
}

TEST_CASE("one address that keeps missing is blocked for a while, others are not", "[guests]") {
  FixedClock clock;
  MissLimiter limiter(clock, 3, std::chrono::seconds(60));
  for (int i = 0; i < 3; ++i) {
    CHECK_FALSE(limiter.blocked("10.0.0.9"));
    limiter.miss("10.0.0.9");
  }
  CHECK(limiter.blocked("10.0.0.9"));
  CHECK_FALSE(limiter.blocked("10.0.0.8"));
  clock.time += std::chrono::seconds(61);
  CHECK_FALSE(limiter.blocked("10.0.0.9"));
}

TEST_CASE("an excerpt of guest text never ends inside a UTF-8 character", "[guests]") {
  const std::string accents(300, 'x');
  std::string text;
  for (int i = 0; i < 300; ++i) {
    text += "\u00e9";
  }
  const auto excerpt = printable_excerpt(text, 511);
  CHECK(is_plain_text(excerpt.substr(0, excerpt.size() - 3)));
  CHECK(excerpt.size() == 510 + 3);
  CHECK(printable_excerpt(accents, 511) == std::string(300, 'x'));
}
