#include "agent/daemon/demo.hpp"

#include <chrono>
#include <iomanip>

#include "agent/instances/identifiers.hpp"
#include "agent/instances/instance_service.hpp"
#include "common/temp_dir.hpp"
#include "hypervisor/libvirt_hypervisor.hpp"

namespace garm_edge::agent {
namespace {

class Step {
 public:
  Step(std::ostream& out, std::string title) : out_(out), start_(std::chrono::steady_clock::now()) {
    out_ << "\n== " << title << "\n";
  }
  ~Step() {
    const auto elapsed =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_);
    out_ << "   (" << std::fixed << std::setprecision(1) << elapsed.count() << " ms)\n";
  }
  Step(const Step&) = delete;
  Step& operator=(const Step&) = delete;

 private:
  std::ostream& out_;
  std::chrono::steady_clock::time_point start_;
};

void print_instance(std::ostream& out, const wire::ProviderInstance& instance) {
  out << "   " << wire::to_json(instance).dump() << "\n";
}

bool expect(std::ostream& out, bool ok, const std::string& what) {
  out << (ok ? "   ok: " : "   FAILED: ") << what << "\n";
  return ok;
}

}  // namespace

wire::BootstrapInstance demo_bootstrap(const std::string& name, const std::string& pool_id) {
  wire::BootstrapInstance b;
  b.name = name;
  b.pool_id = pool_id;
  b.image = "debian-12";
  b.flavor = "small";
  b.os_type = wire::OsType::linux;
  b.arch = wire::OsArch::amd64;
  return b;
}

AgentConfig demo_config(const DemoOptions& options, const std::filesystem::path& state_dir) {
  const bool base_is_path = !options.base_image.empty() && options.base_image.front() == '/';
  AgentConfig config;
  config.agent_id = "demo-agent";
  config.state_dir = state_dir;
  config.libvirt.uri = options.uri;
  config.libvirt.virt_type = options.virt_type;
  config.libvirt.call_timeout = std::chrono::seconds(10);
  config.storage_pool = options.storage_pool;
  config.network = options.network;
  config.images.push_back(ImageConfig{.name = "debian-12",
                                      .base_volume = base_is_path ? "" : options.base_image,
                                      .base_path = base_is_path ? options.base_image : "",
                                      .base_format = "qcow2",
                                      .os_type = wire::OsType::linux,
                                      .os_name = "debian",
                                      .os_version = "12",
                                      .arch = wire::OsArch::amd64,
                                      .source = std::nullopt});
  config.flavors.push_back(
      FlavorConfig{.name = "small", .vcpus = 2, .memory_mib = 2048, .disk_gib = 20});
  // The demo shows the lifecycle, not the host's limits: its four small instances must fit on
  // any host, a 1-CPU box and the test driver's made-up 3 GiB one (test:///default) included.
  config.capacity = {.cpu_overcommit = 1000,
                     .memory_overcommit = 1000,
                     .reserved_memory_mib = 0,
                     .max_instances = 0};
  return config;
}

int run_demo(const DemoOptions& options, std::ostream& out) {
  const auto state_dir =
      options.state_dir.empty() ? create_temp_directory("garm-edge-demo") : options.state_dir;
  const auto config = demo_config(options, state_dir);
  out << "garm-edge instance service demo on " << config.libvirt.uri << ", state in "
      << state_dir.string() << "\n";

  hypervisor::LibvirtHypervisor hypervisor(config.libvirt);
  FileInstanceStore store(config.state_dir);
  SystemClock clock;
  StderrLogger logger(Level::warning);
  InstanceService service(config, hypervisor, store, clock, logger);

  const auto controller = ControllerId::parse(random_uuid());
  const std::string pool = random_uuid();
  const std::string other_pool = random_uuid();
  out << "controller " << controller.str() << ", pool " << pool << "\n";
  bool ok = true;

  std::vector<wire::ProviderInstance> created;
  {
    Step step(out, "create three instances in the pool and one in another pool");
    for (const char* name : {"garm-demo00001", "garm-demo00002", "garm-demo00003"}) {
      created.push_back(service.create(controller, demo_bootstrap(name, pool)));
      print_instance(out, created.back());
    }
    print_instance(out, service.create(controller, demo_bootstrap("garm-demo00004", other_pool)));
  }
  {
    Step step(out, "create garm-demo00001 again (garm retries): same instance, nothing new");
    const auto again = service.create(controller, demo_bootstrap("garm-demo00001", pool));
    print_instance(out, again);
    ok &= expect(out, again.provider_id == created[0].provider_id, "same provider_id");
  }
  {
    Step step(out, "dry run of garm-demo00005: the domain XML it would define");
    const auto dry = service.dry_run_create(controller, demo_bootstrap("garm-demo00005", pool));
    out << dry.domain_xml;
    ok &= expect(out, !service.get(controller, InstanceRef::parse("garm-demo00005")),
                 "nothing was created");
  }
  {
    Step step(out, "list the pool");
    const auto listed = service.list(controller, PoolId::parse(pool));
    out << "   " << wire::to_json(listed).dump() << "\n";
    ok &= expect(out, listed.size() == 3, "three instances in the pool");
  }
  {
    Step step(out, "stop garm-demo00002, then start it again");
    service.stop(controller, InstanceRef::parse("garm-demo00002"), true);
    const auto stopped = service.get(controller, InstanceRef::parse("garm-demo00002"));
    ok &=
        expect(out, stopped && stopped->status == wire::InstanceStatus::stopped, "status stopped");
    service.start(controller, InstanceRef::parse(created[1].provider_id));
    const auto started = service.get(controller, InstanceRef::parse(created[1].provider_id));
    ok &=
        expect(out, started && started->status == wire::InstanceStatus::running, "status running");
  }
  {
    Step step(out, "refuse a hostile create: nothing made, a clear error");
    try {
      auto hostile = demo_bootstrap("x'; rm -rf / #", pool);
      service.create(controller, hostile);
      ok &= expect(out, false, "hostile name refused");
    } catch (const ServiceError& e) {
      out << "   error (" << to_string(e.code()) << "): " << e.what() << "\n";
    }
  }
  {
    Step step(out, "delete by provider ID, by name, and one that is already gone");
    ok &= expect(out, service.remove(controller, InstanceRef::parse(created[0].provider_id)),
                 "deleted by provider ID");
    ok &= expect(out, service.remove(controller, InstanceRef::parse("garm-demo00002")),
                 "deleted by name");
    ok &= expect(out, !service.remove(controller, InstanceRef::parse("garm-demo00002")),
                 "second delete: already gone (success)");
  }
  {
    Step step(out, "remove all of the controller's instances");
    out << "   removed " << service.remove_all(controller) << "\n";
    ok &= expect(out, service.list(controller, PoolId::parse(pool)).empty(), "pool is empty: []");
    ok &= expect(out, service.list(controller, PoolId::parse(other_pool)).empty(),
                 "other pool is empty: []");
  }
  out << "\n" << (ok ? "demo finished: every step behaved" : "demo FAILED") << "\n";
  return ok ? 0 : 1;
}

}  // namespace garm_edge::agent
