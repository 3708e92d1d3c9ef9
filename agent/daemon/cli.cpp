#include "agent/daemon/cli.hpp"

#include <iostream>
#include <string>
#include <string_view>
#include <unistd.h>
#include <vector>

#include "agent/base/config.hpp"
#include "agent/daemon/caches_command.hpp"
#include "agent/daemon/demo.hpp"
#include "agent/daemon/hub_enrolment.hpp"
#include "agent/daemon/images_command.hpp"
#include "agent/daemon/serve.hpp"
#include "agent/instances/instance_service.hpp"
#include "agent/instances/reconcile_loop.hpp"
#include "common/command_line.hpp"
#include "common/durable_file.hpp"
#include "hypervisor/libvirt_hypervisor.hpp"
#include "net/admin_client.hpp"
#include "net/pki.hpp"
#include "net/tls_config.hpp"
#include "wire/identity.hpp"

#ifndef GARM_EDGE_VERSION
#define GARM_EDGE_VERSION "0.0.0"
#endif

namespace garm_edge::agent {
namespace {

using garm_edge::Options;
using garm_edge::UsageError;

constexpr std::string_view kUsage = R"(usage: garm-edge-agent COMMAND [OPTIONS]

Runs garm runner instances as local libvirt VMs.

commands:
  serve --config FILE [--ready-file PATH]
                               run the agent: reconcile, then serve the mTLS control API;
                               once listening, write api_port= and guest_url= lines to PATH
  check-config --config FILE   validate an agent config; exit 1 with the exact problem
  reconcile --config FILE      one reconcile pass: roll back interrupted creates, finish
                               interrupted deletes, remove leftovers; prints what it did
                               (by the running agent when one runs, as the images commands)
  demo [--uri URI] [--state-dir DIR] [--storage-pool NAME] [--network NAME] [--virt-type TYPE]
       [--base-image VOLUME|PATH]
                               drive the instance service through a whole lifecycle
                               (default URI: libvirt's built-in test:///default)
  pki init [--dir DIR] [--dns NAME]... [--ip ADDR]... [--client NAME]
                               write a CA, the agent's server certificate and a first
                               client certificate for garm (default DIR /etc/garm-edge/pki;
                               default: DNS this host and localhost, IP 127.0.0.1;
                               garm-provider-edge checks a URL's name against the DNS
                               names and its address against the IP addresses)
  pki issue-client NAME [--dir DIR]
                               another client certificate (its CN is the identity)
  join TOKEN|- --config FILE [--dns NAME]... [--ip ADDR]...
                               enrol this host at a hub with a token from `garm-edge-hub token
                               create`: the key is made here, the hub signs it for the name,
                               DNS names and addresses the token grants (--dns/--ip only check
                               that they are among them), and the running agent opens its
                               tunnels within a second (docs/fleet.md); "-" reads the token
                               from standard input
  renew --config FILE          renew the hub certificate now; the hub renews once less than a
                               third of its life is left (the agent then does it by itself)
  images list --config FILE    the images and their bases on this host (docs/images.md)
  images pull NAME --config FILE
                               pull an image with a source now (the agent pulls by itself
                               too), with its progress; a new version replaces the base
  images remove NAME --config FILE
                               remove an image's pulled bases and partial downloads, when no
                               guest backs onto them (a running agent pulls it again)
                               The images commands and reconcile go to the running agent
                               through <state_dir>/admin.sock (root or the agent's account);
                               with no agent running, they work on the state directory alone.
  caches list --config FILE    the job caches, their generations and last refresh
                               (docs/caches.md)
  caches refresh NAME --config FILE
                               refresh a cache now through the running agent: a builder guest
                               runs its script, and its result becomes the next generation
  --version                    print the version
  --help                       print this help
)";

int check_config(const Options& options) {
  const auto path = options.require("--config");
  const auto config = load_agent_config(path);
  if (config.api.enabled) {
    // The files must exist, parse, and the key must match the certificate: fail here, not at 3am.
    net::TlsConfig::load(net::TlsConfig::Role::server, {.ca = config.api.ca,
                                                        .crl = config.api.crl,
                                                        .certificate = config.api.certificate,
                                                        .key = config.api.key});
  }
  std::cout << path << ": ok (agent " << config.agent_id << ", " << config.images.size()
            << " images, " << config.flavors.size() << " flavors, libvirt " << config.libvirt.uri
            << ")\n";
  return 0;
}

int serve_command(const Options& options) {
  const auto config = load_agent_config(options.require("--config"));
  StderrLogger logger;
  return serve(
      config, logger,
      ServeOptions{.on_listening = {}, .ready_file = options.get("--ready-file").value_or("")});
}

int reconcile_once(const Options& options) {
  const auto config = load_agent_config(options.require("--config"));
  if (const auto answered = net::ask_running_daemon(
          config.state_dir, {.command = "reconcile", .action = "", .name = ""}, {})) {
    return net::print_admin_result(*answered, "reconcile", std::cout, std::cerr);
  }
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

constexpr const char* kDefaultPkiDir = "/etc/garm-edge/pki";

std::string host_name() {
  char name[256] = {};
  return ::gethostname(name, sizeof name - 1) == 0 && name[0] != '\0' ? name : "localhost";
}

int pki(int argc, char** argv) {
  const std::string_view action = argc > 2 ? argv[2] : "";
  if (action == "init") {
    const Options options(argc, argv, {"--dir", "--dns", "--ip", "--client"}, 3);
    net::PkiInitOptions init;
    init.directory = options.get("--dir").value_or(kDefaultPkiDir);
    init.agent_dns_names = options.get_all("--dns");
    if (init.agent_dns_names.empty()) {
      init.agent_dns_names = {host_name(), "localhost"};
    }
    init.agent_ip_addresses = options.get_all("--ip");
    if (init.agent_ip_addresses.empty()) {
      init.agent_ip_addresses = {"127.0.0.1"};
    }
    init.client_name = options.get("--client").value_or(init.client_name);
    init.client_uri_names = {wire::role_uri(wire::Role::client, init.client_name)};
    net::pki_init(init);
    std::cout << "wrote " << (init.directory / "ca.crt").string() << ", "
              << (init.directory / "agent.crt").string() << " and "
              << (init.directory / "clients" / (init.client_name + ".crt")).string()
              << " (keys 0600 beside them)\n";
    return 0;
  }
  if (action == "issue-client" && argc > 3) {
    const Options options(argc, argv, {"--dir"}, 4);
    const auto files = net::pki_issue_client(options.get("--dir").value_or(kDefaultPkiDir), argv[3],
                                             {wire::role_uri(wire::Role::client, argv[3])});
    std::cout << "wrote " << files.certificate.string() << " and " << files.key.string() << "\n";
    return 0;
  }
  throw UsageError(
      "usage: pki init [--dir DIR] [--dns NAME]... [--ip ADDR]... [--client NAME] | "
      "pki issue-client NAME [--dir DIR]");
}

int join(int argc, char** argv) {
  if (argc < 3) {
    throw UsageError("join needs the token");
  }
  const Options options(argc, argv, {"--config", "--dns", "--ip"}, 3);
  const auto config = load_agent_config(options.require("--config"));
  // "-": the token from standard input, so that it never shows in the process list.
  std::string token = argv[2];
  if (token == "-" && !std::getline(std::cin, token)) {
    throw UsageError("no token on standard input");
  }
  const auto enrolment = join_hub({.token = token,
                                   .state_dir = config.state_dir,
                                   .name = config.agent_id,
                                   .dns_names = options.get_all("--dns"),
                                   .ip_addresses = options.get_all("--ip")});
  const auto granted = net::certificate_facts(*read_file(enrolment.certificate()));
  std::string names;
  for (const auto& name : granted.dns_names) {
    names += " " + name;
  }
  for (const auto& address : granted.ip_addresses) {
    names += " " + address;
  }
  std::cout << "enrolled as " << enrolment.name << " at " << enrolment.hub_url
            << (names.empty() ? " (reached through the hub only)" : ", reached directly as" + names)
            << "; the agent opens its tunnels within a second (start it if it is not running)\n";
  return 0;
}

int renew(const Options& options) {
  const auto config = load_agent_config(options.require("--config"));
  const auto enrolment = load_hub_enrolment(config.state_dir);
  if (!enrolment) {
    throw std::runtime_error("this agent has not joined a hub");
  }
  renew_certificate(*enrolment, std::chrono::seconds(30));
  std::cout << "renewed; new tunnels use the new certificate\n";
  return 0;
}

int demo(const Options& options) {
  DemoOptions demo;
  demo.uri = options.get("--uri").value_or(demo.uri);
  demo.storage_pool = options.get("--storage-pool").value_or(demo.storage_pool);
  demo.network = options.get("--network").value_or(demo.network);
  demo.base_image = options.get("--base-image").value_or(demo.base_image);
  demo.state_dir = options.get("--state-dir").value_or("");
  if (const auto type = options.get("--virt-type"); type && *type != "auto") {
    demo.virt_type = hypervisor::parse_virt_type(*type);
    if (!demo.virt_type) {
      throw UsageError("--virt-type must be auto, kvm, qemu or test");
    }
  }
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
    if (command == "serve") {
      return serve_command(Options(argc, argv, {"--config", "--ready-file"}));
    }
    if (command == "reconcile") {
      return reconcile_once(Options(argc, argv, {"--config"}));
    }
    if (command == "pki") {
      return pki(argc, argv);
    }
    if (command == "join") {
      return join(argc, argv);
    }
    if (command == "images") {
      const std::string action = argc > 2 ? argv[2] : "";
      if (action != "list" && action != "pull" && action != "remove") {
        throw UsageError("images needs list, pull NAME or remove NAME");
      }
      const bool named = action != "list";
      if (named && argc < 4) {
        throw UsageError("images " + action + " needs an image name");
      }
      return images_command(action, named ? argv[3] : "",
                            Options(argc, argv, {"--config"}, named ? 4 : 3), std::cout);
    }
    if (command == "caches") {
      const std::string action = argc > 2 ? argv[2] : "";
      if (action != "list" && action != "refresh") {
        throw UsageError("caches needs list or refresh NAME");
      }
      const bool named = action == "refresh";
      if (named && argc < 4) {
        throw UsageError("caches refresh needs a cache name");
      }
      return caches_command(action, named ? argv[3] : "",
                            Options(argc, argv, {"--config"}, named ? 4 : 3), std::cout);
    }
    if (command == "renew") {
      return renew(Options(argc, argv, {"--config"}));
    }
    if (command == "demo") {
      return demo(Options(
          argc, argv,
          {"--uri", "--state-dir", "--storage-pool", "--network", "--base-image", "--virt-type"}));
    }
    std::cerr << "garm-edge-agent: unknown command \"" << command << "\"\n\n" << kUsage;
    return 2;
  } catch (const UsageError& e) {
    std::cerr << "garm-edge-agent " << command << ": " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "garm-edge-agent " << command << ": " << e.what() << "\n";
    return 1;
  }
}

}  // namespace garm_edge::agent
