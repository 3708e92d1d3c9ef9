// Prints the figures issue #2 asks for, on libvirt's test driver: the wall time of 200
// concurrent creates, and the time to list pools of 250, 500 and 1,000 instances (to show the
// cost grows linearly). Speed is reported, never asserted.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdlib.h>
#include <string>
#include <thread>
#include <vector>

#include "agent/daemon/demo.hpp"
#include "agent/instances/identifiers.hpp"
#include "agent/instances/instance_service.hpp"
#include "common/temp_dir.hpp"
#include "hypervisor/libvirt_hypervisor.hpp"

namespace {

using namespace garm_edge;
using garm_edge::TempDir;
using Clock = std::chrono::steady_clock;

constexpr const char* kNodeXml = R"(<node>
  <cpu><mhz>2000</mhz><model>x86_64</model><nodes>1</nodes><sockets>1</sockets><cores>64</cores><threads>1</threads></cpu>
  <memory>1073741824</memory>
  <network><name>bench-net</name><bridge name='virbr-bench'/><forward mode='nat'/>
    <ip address='10.77.0.1' netmask='255.255.0.0'><dhcp><range start='10.77.0.2' end='10.77.255.254'/></dhcp></ip>
  </network>
  <pool type='dir'><name>bench-pool</name><target><path>/bench-pool</path></target>
    <volume type='file'><name>base.qcow2</name><capacity unit='GiB'>2</capacity><target><format type='qcow2'/></target></volume>
  </pool>
</node>
)";

struct Bench {
  TempDir dir{"garm-edge-bench"};
  agent::AgentConfig config;
  std::unique_ptr<hypervisor::LibvirtHypervisor> hypervisor;
  std::unique_ptr<agent::FileInstanceStore> store;
  agent::SystemClock clock;
  agent::StderrLogger log{agent::Level::warning};
  std::unique_ptr<agent::InstanceService> service;

  Bench() {
    std::ofstream(dir.path() / "node.xml") << kNodeXml;
    agent::DemoOptions options;
    options.uri = "test://" + (dir.path() / "node.xml").string();
    options.storage_pool = "bench-pool";
    options.network = "bench-net";
    options.base_image = "base.qcow2";
    config = agent::demo_config(options, dir.path() / "state");
    config.max_concurrent_creates = 8;
    hypervisor = std::make_unique<hypervisor::LibvirtHypervisor>(config.libvirt);
    store = std::make_unique<agent::FileInstanceStore>(config.state_dir);
    service = std::make_unique<agent::InstanceService>(config, *hypervisor, *store, clock, log);
  }
};

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

/// Creates `count` instances from `threads` threads at once; returns the wall time in ms.
double create_concurrently(agent::InstanceService& service, const agent::ControllerId& controller,
                           const std::string& pool, const std::string& prefix, int count) {
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  const auto start = Clock::now();
  for (int i = 0; i < count; ++i) {
    threads.emplace_back([&, i] {
      try {
        service.create(controller, agent::demo_bootstrap(prefix + std::to_string(i), pool));
      } catch (const std::exception& e) {
        ++failures;
        std::fprintf(stderr, "create failed: %s\n", e.what());
      }
    });
  }
  for (auto& thread : threads) {
    thread.join();
  }
  const double elapsed = ms_since(start);
  if (failures > 0) {
    std::fprintf(stderr, "%d creates failed\n", failures.load());
    std::exit(1);
  }
  return elapsed;
}

double median_list_ms(agent::InstanceService& service, const agent::ControllerId& controller,
                      const std::string& pool, std::size_t expected) {
  std::vector<double> samples;
  for (int run = 0; run < 15; ++run) {
    const auto start = Clock::now();
    const auto listed = service.list(controller, agent::PoolId::parse(pool));
    samples.push_back(ms_since(start));
    if (listed.size() != expected) {
      std::fprintf(stderr, "list returned %zu instances, expected %zu\n", listed.size(), expected);
      std::exit(1);
    }
  }
  std::sort(samples.begin(), samples.end());
  return samples[samples.size() / 2];
}

}  // namespace

int main() {
  Bench bench;
  const auto controller = agent::ControllerId::parse(agent::random_uuid());

  const std::string burst_pool = agent::random_uuid();
  const double burst_ms =
      create_concurrently(*bench.service, controller, burst_pool, "garm-burst", 200);
  std::printf(
      "create: 200 concurrent creates (cap %zu) on the test driver: %.1f ms wall, %.2f ms per "
      "create\n",
      bench.config.max_concurrent_creates, burst_ms, burst_ms / 200);

  // Pools of 250, 500 and 1,000 instances side by side: list cost should grow linearly.
  for (int size : {250, 500, 1000}) {
    const std::string pool = agent::random_uuid();
    create_concurrently(*bench.service, controller, pool, "garm-p" + std::to_string(size) + "-",
                        size);
    const double list_ms =
        median_list_ms(*bench.service, controller, pool, static_cast<std::size_t>(size));
    std::printf(
        "list: pool of %4d instances (%zu domains on the host): median %.2f ms, %.1f us per "
        "instance\n",
        size, bench.hypervisor->list({}).size(), list_ms, 1000.0 * list_ms / size);
  }
  return 0;
}
