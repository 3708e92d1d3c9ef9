#include <thread>

#include <catch2/catch.hpp>

#include "hypervisor/libvirt_hypervisor.hpp"
#include "support/test_support.hpp"

using namespace garm_edge::hypervisor;
using garm_edge::testing::fixture_uri;

namespace {

LibvirtHypervisor connect_fixture() {
  return LibvirtHypervisor(LibvirtOptions{.uri = fixture_uri("hypervisor.xml"),
                                          .virt_type = std::nullopt,
                                          .call_timeout = std::chrono::seconds(10),
                                          .workers = 2,
                                          .reconnect_interval = std::chrono::seconds(1),
                                          .on_connection_change = {}});
}

DomainSpec spec_named(const std::string& name, const std::string& uuid, Tags tags) {
  DomainSpec spec;
  spec.name = name;
  spec.uuid = uuid;
  spec.disk_path = "/edge-pool/" + name + ".qcow2";
  spec.tags = std::move(tags);
  return spec;
}

auto kind_is(HypervisorError::Kind kind) {
  return Catch::Predicate<HypervisorError>(
      [kind](const HypervisorError& e) { return e.kind() == kind; }, "error kind");
}

}  // namespace

TEST_CASE("a URI libvirt cannot open fails at startup with a clear error", "[hypervisor]") {
  CHECK_THROWS_WITH(LibvirtHypervisor(LibvirtOptions{.uri = "test:///nonexistent/node.xml",
                                                     .virt_type = std::nullopt,
                                                     .call_timeout = std::chrono::seconds(5),
                                                     .workers = 1,
                                                     .reconnect_interval = std::chrono::seconds(1),
                                                     .on_connection_change = {}}),
                    Catch::Contains("connect to libvirt at test:///nonexistent/node.xml"));
}

TEST_CASE("the test driver runs every architecture as type test", "[hypervisor]") {
  auto hv = connect_fixture();
  CHECK(hv.virt_type_for(GuestArch::x86_64) == VirtType::test);
  CHECK(hv.virt_type_for(GuestArch::aarch64) == VirtType::test);
  CHECK(hv.capacity().cpus == 8);
  CHECK(hv.pool_path("edge-pool") == "/edge-pool");
}

TEST_CASE("libvirt errors are mapped at the boundary", "[hypervisor]") {
  auto hv = connect_fixture();
  CHECK_FALSE(hv.find_by_uuid("0b6f5b8e-3a52-4c8e-9c1f-2a3b4c5d6e7f"));
  CHECK_FALSE(hv.find_by_name("nope"));
  CHECK_FALSE(hv.destroy("0b6f5b8e-3a52-4c8e-9c1f-2a3b4c5d6e7f"));
  CHECK_FALSE(hv.undefine("0b6f5b8e-3a52-4c8e-9c1f-2a3b4c5d6e7f"));
  CHECK_FALSE(hv.delete_volume("edge-pool", "nope.qcow2"));
  CHECK_THROWS_MATCHES(hv.start("0b6f5b8e-3a52-4c8e-9c1f-2a3b4c5d6e7f"), HypervisorError,
                       kind_is(HypervisorError::Kind::not_found));
  CHECK_THROWS_MATCHES(hv.find_volume("no-such-pool", "x"), HypervisorError,
                       kind_is(HypervisorError::Kind::not_found));

  hv.define(spec_named("dup", "0b6f5b8e-3a52-4c8e-9c1f-2a3b4c5d6e7f", Tags{{"k", "v"}}));
  CHECK_THROWS_MATCHES(hv.define(spec_named("dup", "1b6f5b8e-3a52-4c8e-9c1f-2a3b4c5d6e7f", {})),
                       HypervisorError, kind_is(HypervisorError::Kind::already_exists));
  const VolumeSpec volume{.pool = "edge-pool",
                          .name = "v.qcow2",
                          .capacity_bytes = 1 << 30,
                          .backing_path = "/edge-pool/debian-12.qcow2",
                          .backing_format = "qcow2"};
  CHECK(hv.create_overlay(volume).path == "/edge-pool/v.qcow2");
  CHECK_THROWS_MATCHES(hv.create_overlay(volume), HypervisorError,
                       kind_is(HypervisorError::Kind::already_exists));
  CHECK(hv.delete_volume("edge-pool", "v.qcow2"));
}

TEST_CASE("start, shutdown and destroy are idempotent", "[hypervisor]") {
  auto hv = connect_fixture();
  const auto domain =
      hv.define(spec_named("power", "2b6f5b8e-3a52-4c8e-9c1f-2a3b4c5d6e7f", Tags{{"k", "v"}}));
  CHECK(domain.state == PowerState::shutoff);
  hv.start(domain.uuid);
  hv.start(domain.uuid);
  CHECK(hv.find_by_uuid(domain.uuid)->state == PowerState::running);
  hv.shutdown(domain.uuid, std::chrono::seconds(2));
  CHECK(hv.find_by_uuid(domain.uuid)->state == PowerState::shutoff);
  hv.shutdown(domain.uuid, std::chrono::seconds(2));
  CHECK_FALSE(hv.destroy(domain.uuid));
  CHECK(hv.undefine(domain.uuid));
  CHECK_FALSE(hv.find_by_uuid(domain.uuid));
}

TEST_CASE("listing filters on tags and never returns an untagged domain", "[hypervisor]") {
  auto hv = connect_fixture();
  hv.define(
      spec_named("a", "3b6f5b8e-3a52-4c8e-9c1f-2a3b4c5d6e7f", Tags{{"pool", "1"}, {"agent", "x"}}));
  hv.define(
      spec_named("b", "4b6f5b8e-3a52-4c8e-9c1f-2a3b4c5d6e7f", Tags{{"pool", "2"}, {"agent", "x"}}));
  hv.define(spec_named("untagged", "5b6f5b8e-3a52-4c8e-9c1f-2a3b4c5d6e7f", {}));
  CHECK(hv.list({}).size() == 2);
  CHECK(hv.list({{"agent", "x"}}).size() == 2);
  const auto pool1 = hv.list({{"pool", "1"}});
  REQUIRE(pool1.size() == 1);
  CHECK(pool1[0].name == "a");
  CHECK(pool1[0].uuid == "3b6f5b8e-3a52-4c8e-9c1f-2a3b4c5d6e7f");
  CHECK(hv.list({{"pool", "3"}}).empty());
}

TEST_CASE("a domain redefined with other tags is listed with its new tags", "[hypervisor]") {
  auto hv = connect_fixture();
  const std::string uuid = "6b6f5b8e-3a52-4c8e-9c1f-2a3b4c5d6e7f";
  hv.define(spec_named("moving", uuid, Tags{{"pool", "old"}}));
  CHECK(hv.list({{"pool", "old"}}).size() == 1);  // now cached
  hv.undefine(uuid);
  hv.define(spec_named("moving", uuid, Tags{{"pool", "new"}}));
  // The cache learns of the change through libvirt's events, delivered on the event thread.
  bool moved = false;
  for (int i = 0; i < 200 && !moved; ++i) {
    moved = hv.list({{"pool", "new"}}).size() == 1 && hv.list({{"pool", "old"}}).empty();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  CHECK(moved);
  CHECK(hv.find_by_uuid(uuid)->tags.get("pool") == std::optional<std::string_view>("new"));
}
