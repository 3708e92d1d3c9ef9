// Pool shapes on real libvirt code (the test driver): what a pool's extra specs ask beyond its
// flavor is given within the operator's limits, counted, and removed with the guest; whatever
// the agent does not allow is refused with a clear error and nothing is made.
#include <filesystem>
#include <fstream>

#include <catch2/catch.hpp>

#include "agent/instances/identifiers.hpp"
#include "support/service_error_matcher.hpp"
#include "support/test_support.hpp"

using namespace garm_edge;
using namespace garm_edge::testing;
using Code = agent::ServiceError::Code;

namespace {

/// Allows roots up to 40 GiB, scratch disks on nvme-pool (`nvme`, any controller; `private`,
/// kOtherController's only), a further NIC on lab-net and a bridge, and nested virtualization.
void with_shapes(agent::AgentConfig& config, const std::filesystem::path& modules) {
  enable_guest_addresses(config, "192.168.150.10-192.168.150.40");
  config.guests.address = "127.0.0.1";
  config.extra_specs = {.max_root_disk_gib = 40, .nested_virtualization = true};
  config.scratch_pools = {
      {.name = "nvme", .storage_pool = "nvme-pool", .max_disk_gib = 100, .scope = {}},
      {.name = "private",
       .storage_pool = "nvme-pool",
       .max_disk_gib = 100,
       .scope = {.controllers = {kOtherController}}}};
  config.networks = {{.name = "lab", .network = "lab-net", .bridge = "", .scope = {}},
                     {.name = "lan",
                      .network = "",
                      .bridge = "br-lan",
                      .scope = {.controllers = {kOtherController}}}};
  config.libvirt.kernel_modules = modules;
}

/// The host's kvm module, as the agent reads it when it connects: whether it offers nested
/// virtualization (`kvm_intel`'s `nested`), or no such module.
enum class KvmModule { absent, nested_off, nested_on };

void write_kvm_module(const std::filesystem::path& modules, KvmModule kvm) {
  if (kvm == KvmModule::absent) {
    return;
  }
  std::filesystem::create_directories(modules / "kvm_intel" / "parameters");
  std::ofstream(modules / "kvm_intel" / "parameters" / "nested")
      << (kvm == KvmModule::nested_on ? "Y\n" : "N\n");
}

struct ShapeHost {
  explicit ShapeHost(const std::function<void(agent::AgentConfig&)>& adjust = {},
                     KvmModule kvm = KvmModule::absent)
      : host("shapes.xml",
             [&](agent::AgentConfig& config) {
               write_kvm_module(modules.path(), kvm);
               with_shapes(config, modules.path());
               if (adjust) {
                 adjust(config);
               }
             }),
        guests(host.config, host.hypervisor, host.log),
        service(host.service()) {
    guests.serve(*service);
  }
  std::vector<std::string> scratch_volumes() { return host.hypervisor.list_volumes("nvme-pool"); }

  TempDir modules;
  Host host;
  ServedGuests guests;
  std::unique_ptr<agent::InstanceService> service;
};

wire::BootstrapInstance shaped(const std::string& name, const nlohmann::json& shape) {
  auto bootstrap = bootstrap_for(name);
  bootstrap.extra_specs = shape;
  return bootstrap;
}

const nlohmann::json kFullShape = {{"root_disk_gib", 30},
                                   {"scratch_disks", {{{"pool", "nvme"}, {"size_gib", 10}}}},
                                   {"networks", {"lab"}}};

}  // namespace

TEST_CASE("a pool gets its larger root disk, a scratch disk on the named pool and a further NIC",
          "[shapes]") {
  ShapeHost shapes;
  auto& host = shapes.host;
  const auto dry =
      shapes.service->dry_run_create(kControllerId, shaped("garm-shape01", kFullShape));
  CHECK_THAT(dry.volume_xml, Catch::Contains(std::to_string(30ULL << 30U)));
  CHECK_THAT(dry.domain_xml, Catch::Contains("network=\"lab-net\"") &&
                                 Catch::Contains("/nvme-pool/") &&
                                 Catch::Contains("<serial>garm-scratch-0</serial>"));

  const auto created = shapes.service->create(kControllerId, shaped("garm-shape01", kFullShape));
  const auto domain_name = agent::domain_name_for(kController, "garm-shape01");
  const auto record = host.store.get(domain_name);
  REQUIRE(record);
  CHECK(record->root_disk_gib == 30);
  REQUIRE(record->scratch_disks.size() == 1);
  const auto& scratch = record->scratch_disks.front();
  CHECK(scratch.volume_name == agent::scratch_volume_name_for(domain_name, 0));
  CHECK(scratch.mount == "/mnt/scratch");
  CHECK(host.hypervisor.disk_paths(created.provider_id) ==
        std::vector<std::string>{"/edge-pool/" + agent::volume_name_for(domain_name),
                                 "/nvme-pool/" + scratch.volume_name});
  REQUIRE(record->extra_nics.size() == 1);
  // The guest formats and mounts the disk and brings the NIC up: its seed says how.
  CHECK_THAT(record->guest->user_data, Catch::Contains("garm-scratch-0") &&
                                           Catch::Contains("/mnt/scratch") &&
                                           Catch::Contains(record->extra_nics.front().mac));
  // Counted: 30 GiB of root and 10 of scratch.
  CHECK(shapes.service->capacity().used.disk_gib == 40);

  shapes.service->remove(kControllerId, instance_ref("garm-shape01"));
  CHECK(host.holds_nothing_of(kController, "garm-shape01"));
  CHECK(shapes.scratch_volumes().empty());
}

TEST_CASE(
    "whatever the agent does not allow is refused, naming the extra spec, and nothing is made",
    "[shapes]") {
  ShapeHost shapes([](agent::AgentConfig& config) { config.capacity.disk_gib = 50; },
                   KvmModule::nested_off);
  const std::vector<std::pair<nlohmann::json, std::string>> refused = {
      {{{"root_disk_gib", 41}}, "more than this agent allows (40 GiB"},
      {{{"root_disk_gib", 10}}, "smaller than flavor small's 20 GiB"},
      {{{"scratch_disks", {{{"pool", "sata"}, {"size_gib", 1}}}}}, "no scratch pool \"sata\""},
      // Another controller's pool is answered as if there were none.
      {{{"scratch_disks", {{{"pool", "private"}, {"size_gib", 1}}}}},
       "no scratch pool \"private\""},
      {{{"scratch_disks", {{{"pool", "nvme"}, {"size_gib", 101}}}}}, "(100 GiB, max_disk_gib)"},
      {{{"scratch_disks", {{{"pool", "nvme"}, {"size_gib", 1}, {"mount", "/mnt/../etc"}}}}},
       "extra_specs.scratch_disks[0].mount"},
      {{{"networks", {"dmz"}}}, "no network \"dmz\""},
      {{{"networks", {"lan"}}}, "no network \"lan\""},
      {{{"nested_virtualization", true}}, "its kvm module has nested off"},
      {{{"virt_type", "xen"}}, "extra_specs.virt_type"}};
  for (const auto& [shape, message] : refused) {
    INFO(shape.dump());
    CHECK_THROWS_MATCHES(shapes.service->create(kControllerId, shaped("garm-shape02", shape)),
                         agent::ServiceError,
                         has_code(Code::invalid_argument) && message_contains(message));
    CHECK(shapes.host.holds_nothing_of(kController, "garm-shape02"));
    CHECK(shapes.scratch_volumes().empty());
  }
  // Within every limit but beyond the disk the host may give: 40 + 20 of 50 GiB.
  const nlohmann::json large_scratch = {{"scratch_disks", {{{"pool", "nvme"}, {"size_gib", 40}}}}};
  CHECK_THROWS_MATCHES(shapes.service->create(kControllerId, shaped("garm-shape03", large_scratch)),
                       agent::ServiceError, has_code(Code::no_capacity));
  CHECK(shapes.host.holds_nothing_of(kController, "garm-shape03"));
  CHECK(shapes.scratch_volumes().empty());
  // The other controller has what is kept for it.
  const nlohmann::json own = {{"scratch_disks", {{{"pool", "private"}, {"size_gib", 1}}}},
                              {"networks", {"lan"}}};
  const auto dry = shapes.service->dry_run_create(kOtherControllerId, shaped("garm-shape04", own));
  CHECK_THAT(dry.domain_xml, Catch::Contains("bridge=\"br-lan\""));
}

TEST_CASE("nested virtualization needs the operator's leave and a host whose KVM offers it",
          "[shapes]") {
  const nlohmann::json nested = {{"nested_virtualization", true}};
  {
    ShapeHost shapes(
        [](agent::AgentConfig& config) { config.extra_specs.nested_virtualization = false; },
        KvmModule::nested_on);
    CHECK_THROWS_MATCHES(shapes.service->create(kControllerId, shaped("garm-nested1", nested)),
                         agent::ServiceError,
                         has_code(Code::invalid_argument) &&
                             message_contains("[extra_specs] nested_virtualization"));
    CHECK(shapes.service->capacity().host.nested_virtualization);
  }
  ShapeHost shapes({}, KvmModule::nested_on);
  shapes.service->create(kControllerId, shaped("garm-nested1", nested));
  CHECK(shapes.host.store.get(agent::domain_name_for(kController, "garm-nested1")));
}

TEST_CASE("virt_type kvm is refused where the host emulates the guest's architecture", "[shapes]") {
  ShapeHost shapes(
      [](agent::AgentConfig& config) { config.libvirt.virt_type = hypervisor::VirtType::qemu; });
  CHECK_THROWS_MATCHES(
      shapes.service->create(kControllerId, shaped("garm-kvm1", {{"virt_type", "kvm"}})),
      agent::ServiceError,
      has_code(Code::invalid_argument) && message_contains("has no KVM for x86_64 guests"));
  CHECK(shapes.host.holds_nothing_of(kController, "garm-kvm1"));
}

TEST_CASE("reconcile removes a scratch disk no instance holds", "[shapes][reconcile]") {
  ShapeHost shapes;
  const auto orphan =
      agent::scratch_volume_name_for(agent::domain_name_for(kController, "garm-gone"), 0);
  shapes.host.hypervisor.create_overlay({.pool = "nvme-pool",
                                         .name = orphan,
                                         .capacity_bytes = 1ULL << 30U,
                                         .backing_path = "",
                                         .backing_format = "qcow2"});
  shapes.service->create(kControllerId, shaped("garm-kept", kFullShape));
  const auto report = shapes.service->reconcile();
  CHECK(report.orphan_volumes == 1);
  CHECK(shapes.scratch_volumes() == std::vector<std::string>{agent::scratch_volume_name_for(
                                        agent::domain_name_for(kController, "garm-kept"), 0)});
}

TEST_CASE("garm's pool validation refuses a shape the agent would refuse at create", "[shapes]") {
  ShapeHost shapes;
  const auto pool = [](const nlohmann::json& shape) {
    return agent::PoolSpec{.image = "debian-12",
                           .flavor = "small",
                           .os_type = wire::OsType::linux,
                           .arch = wire::OsArch::amd64,
                           .extra_specs = shape};
  };
  CHECK_NOTHROW(shapes.service->validate_pool(kControllerId, pool(kFullShape)));
  CHECK_THROWS_MATCHES(shapes.service->validate_pool(kControllerId, pool({{"root_disk_gib", 41}})),
                       agent::ServiceError,
                       has_code(Code::invalid_argument) && message_contains("root_disk_gib"));
  const nlohmann::json private_pool = {{"scratch_disks", {{{"pool", "private"}, {"size_gib", 1}}}}};
  CHECK_THROWS(shapes.service->validate_pool(kControllerId, pool(private_pool)));
  CHECK_NOTHROW(shapes.service->validate_pool(kOtherControllerId, pool(private_pool)));
  CHECK(shapes.scratch_volumes().empty());
}
