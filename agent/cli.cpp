#include "agent/cli.hpp"

#include <iostream>
#include <string>
#include <string_view>
#include <vector>

#include "agent/config.hpp"
#include "agent/demo.hpp"
#include "agent/instance_service.hpp"
#include "agent/reconcile_loop.hpp"
#include "hypervisor/libvirt_hypervisor.hpp"

#ifndef GARM_EDGE_VERSION
#define GARM_EDGE_VERSION "0.0.0"
#endif

namespace garm_edge::agent {
namespace {

constexpr std::string_view kUsage = R"(usage: garm-edge-agent COMMAND [OPTIONS]

Runs garm runner instances as local libvirt VMs.

commands:
  check-config --config FILE   validate an agent config; exit 1 with the exact problem
  reconcile --config FILE      one reconcile pass: roll back interrupted creates, finish
                               interrupted deletes, remove leftovers; prints what it did
  demo [--uri URI] [--state-dir DIR] [--storage-pool NAME] [--network NAME]
       [--base-image VOLUME|PATH]
                               drive the instance service through a whole lifecycle
                               (default URI: libvirt's built-in test:///default)
  --version                    print the version
  --help                       print this help
)";

/// `--name value` pairs after the command; unknown options are an error.
class Options {
 public:
  Options(int argc, char** argv, std::vector<std::string_view> known) {
    for (int i = 2; i < argc; ++i) {
      const std::string_view arg = argv[i];
      bool matched = false;
      for (const auto name : known) {
        if (arg == name && i + 1 < argc) {
          values_.emplace_back(name, argv[++i]);
          matched = true;
        }
      }
      if (!matched) {
        throw std::invalid_argument("unexpected argument \"" + std::string(arg) + "\"");
      }
    }
  }

  std::optional<std::string> get(std::string_view name) const {
    for (const auto& [key, value] : values_) {
      if (key == name) {
        return value;
      }
    }
    return std::nullopt;
  }

  std::string require(std::string_view name) const {
    auto value = get(name);
    if (!value) {
      throw std::invalid_argument(std::string(name) + " is required");
    }
    return *value;
  }

 private:
  std::vector<std::pair<std::string_view, std::string>> values_;
};

int check_config(const Options& options) {
  const auto path = options.require("--config");
  const auto config = load_agent_config(path);
  std::cout << path << ": ok (agent " << config.agent_id << ", " << config.images.size()
            << " images, " << config.flavors.size() << " flavors, libvirt " << config.libvirt.uri
            << ")\n";
  return 0;
}

int reconcile_once(const Options& options) {
  const auto config = load_agent_config(options.require("--config"));
  hypervisor::LibvirtHypervisor hypervisor(config.libvirt);
  FileInstanceStore store(config.state_dir);
  SystemClock clock;
  StderrLogger logger;
  InstanceService service(config, hypervisor, store, clock, logger);
  const auto report = service.reconcile();
  const auto summary = summarize(report);
  std::cout << (summary.empty() ? "nothing to do" : summary) << "\n";
  return report.failures == 0 ? 0 : 1;
}

int demo(const Options& options) {
  DemoOptions demo;
  demo.uri = options.get("--uri").value_or(demo.uri);
  demo.storage_pool = options.get("--storage-pool").value_or(demo.storage_pool);
  demo.network = options.get("--network").value_or(demo.network);
  demo.base_image = options.get("--base-image").value_or(demo.base_image);
  demo.state_dir = options.get("--state-dir").value_or("");
  return run_demo(demo, std::cout);
}

}  // namespace

int run_cli(int argc, char** argv) {
  const std::string_view command = argc > 1 ? argv[1] : "--help";
  try {
    if (command == "--version") {
      std::cout << "garm-edge-agent " << GARM_EDGE_VERSION << "\n";
      return 0;
    }
    if (command == "--help" || command == "-h") {
      std::cout << kUsage;
      return 0;
    }
    if (command == "check-config") {
      return check_config(Options(argc, argv, {"--config"}));
    }
    if (command == "reconcile") {
      return reconcile_once(Options(argc, argv, {"--config"}));
    }
    if (command == "demo") {
      return demo(Options(argc, argv,
                          {"--uri", "--state-dir", "--storage-pool", "--network", "--base-image"}));
    }
    std::cerr << "garm-edge-agent: unknown command \"" << command << "\"\n\n" << kUsage;
    return 2;
  } catch (const std::invalid_argument& e) {
    std::cerr << "garm-edge-agent " << command << ": " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "garm-edge-agent " << command << ": " << e.what() << "\n";
    return 1;
  }
}

}  // namespace garm_edge::agent
