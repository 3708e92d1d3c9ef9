#include "hub/cli.hpp"

#include <csignal>
#include <iostream>
#include <thread>

#include "common/command_line.hpp"
#include "common/config_error.hpp"
#include "common/durable_file.hpp"
#include "common/log.hpp"
#include "common/unix_time.hpp"
#include "hub/hub_config.hpp"
#include "hub/hub_server.hpp"
#include "hub/hub_store.hpp"
#include "hub/postgres_state.hpp"
#include "hub/record_commands.hpp"
#include "hub/state_migration.hpp"
#include "net/admin_client.hpp"
#include "net/pki.hpp"
#include "wire/identity.hpp"
#include "wire/join_token.hpp"

#ifndef GARM_EDGE_VERSION
#define GARM_EDGE_VERSION "0.0.0"
#endif

namespace garm_edge::hub {
namespace {

constexpr std::string_view kUsage = R"(usage: garm-edge-hub COMMAND [OPTIONS]

Holds a garm-edge fleet's CA, enrols agents, and relays garm-provider-edge's requests to agents
that dial in (docs/fleet.md). The commands on the records (token, agents, remove, issue-client,
revoke-client, revoked) run in the hub that serves the config's state_dir when one runs
(through state_dir/admin.sock); with none, here, on the config's database or files.

commands:
  init --state-dir DIR [--dns NAME]... [--ip ADDR]... [--client NAME]
                      a new fleet CA, the hub's certificate (for the names and addresses
                      agents and providers use, and localhost) and a client certificate for garm
  serve --config FILE run the hub
  token create --config FILE [--name HOST [--dns NAME]... [--ip ADDR]... | --name-pattern GLOB]
               [--ttl-seconds N] [--uses N] [--label LABEL]...
                      print a join token for `garm-edge-agent join` (default: 1 hour, 1 use).
                      The token decides who the host becomes: --name fixes its name, and
                      --dns/--ip the names garm reaches it by directly; --name-pattern
                      (lab-board-*) or no name makes hosts reached through the hub only
  token list --config FILE
  token revoke ID --config FILE
  agents --config FILE
                      the enrolled agents and their certificates' expiry
  remove NAME --config FILE
                      forget an agent and revoke its certificates: its tunnels close within a
                      second, and agents and providers that load the CRL refuse it directly
  issue-client NAME [--role client|metrics] --config FILE
                      another client certificate for a garm-provider-edge or an operator;
                      --role metrics: one that reads /metrics and nothing else (Prometheus,
                      docs/observability.md)
  revoke-client NAME --config FILE
                      revoke a client certificate of the hub's CA (it goes into the CRL)
  revoked --config FILE
                      the certificates the CRL (state_dir/pki/crl.pem, GET /v1/crl) names
  migrate --to database|files --config FILE
                      with the hubs stopped: copy the records (tokens, agents, revocations and
                      the CRL's number) from state_dir into the config's [database], which
                      must be empty, and set the files aside; or back into an empty state_dir
  --version | --help
)";

int init(int argc, char** argv) {
  const Options options(argc, argv, {"--state-dir", "--dns", "--ip", "--client"});
  const auto directory = options.require("--state-dir");
  HubStore::init(directory, {.dns_names = options.get_all("--dns"),
                             .ip_addresses = options.get_all("--ip"),
                             .client_name = options.get("--client").value_or("garm")});
  std::cout << "wrote the fleet CA and the hub's certificate to " << directory << "/pki\n";
  return 0;
}

int serve(int argc, char** argv) {
  const Options options(argc, argv, {"--config"});
  auto config = load_hub_config(options.require("--config"));
  if (const auto left = records_in_files(config.state_dir); config.database && left > 0) {
    throw std::runtime_error(
        config.state_dir.string() + " holds " + std::to_string(left) +
        " token and agent records on files, which a hub on [database] would not read: move "
        "them first (garm-edge-hub migrate --to database --config " +
        options.require("--config") + ")");
  }
  StderrLogger log;
  asio::io_context io;
  HubServer server(io, config, log);
  server.start();
  log.info("garm-edge-hub " GARM_EDGE_VERSION ": agents dial port " +
           std::to_string(server.agent_port()) + ", providers call port " +
           std::to_string(server.provider_port()));
  asio::signal_set signals(io, SIGINT, SIGTERM);
  signals.async_wait([&](const asio::error_code&, int) {
    log.info("stopping");
    server.stop();
    io.stop();
  });
  std::thread second([&io] { io.run(); });
  io.run();
  second.join();
  return 0;
}

/// A command on the records: through the hub running on this state directory, if one does
/// (only the daemon writes its state directory), else here on the database or the files.
int record_command(int argc, char** argv) {
  const std::vector<std::string> arguments(argv + 1, argv + argc);
  std::optional<std::string> config_path;
  for (int i = 2; i + 1 < argc; ++i) {
    if (std::string_view(argv[i]) == "--config") {
      config_path = argv[i + 1];
    }
  }
  if (!config_path) {
    throw UsageError(std::string(argv[1]) + " needs --config FILE");
  }
  const auto config = load_hub_config(*config_path);
  if (const auto answered = net::ask_running_daemon(
          config.state_dir,
          {.command = "records", .action = {}, .name = {}, .arguments = arguments}, {},
          std::chrono::seconds(60), "hub")) {
    std::cout << answered->output;
    std::cerr << answered->error;
    return answered->exit_code;
  }
  auto store = open_hub_store(config);
  const auto result = run_record_command(store, config, arguments, kUsage);
  std::cout << result.out;
  std::cerr << result.err;
  return result.exit_code;
}

int migrate(int argc, char** argv) {
  const Options options(argc, argv, {"--config", "--to"});
  const auto config = load_hub_config(options.require("--config"));
  const auto to = options.require("--to");
  if (to != "database" && to != "files") {
    throw UsageError("--to is database or files");
  }
  if (!config.database) {
    throw UsageError("migrate moves the records between state_dir and [database]: " +
                     options.require("--config") + " has no [database] url");
  }
  HubStore files(config.state_dir, config.certificates);  // refuses a directory with no hub
  const auto database = open_postgres_state(*config.database);
  const auto pki = config.state_dir / "pki";
  const auto copied = to == "database" ? copy_records(files.state(), *database, pki)
                                       : copy_records(*database, files.state(), pki);
  std::cout << "copied " << copied.tokens << " tokens, " << copied.agents << " agents and "
            << copied.revocations << " revocations (CRL number " << copied.crl_number << ") "
            << (to == "database" ? "into " + database->describe()
                                 : "into " + config.state_dir.string())
            << "\n";
  if (to == "database") {
    std::cout << "the files' records are now in "
              << set_file_records_aside(config.state_dir, unix_now()).string()
              << "; start the hubs with [database] in their config\n";
  } else {
    std::cout << "the database keeps its copy; remove [database] from the config before the "
                 "hub starts again\n";
  }
  return 0;
}

int dispatch(int argc, char** argv) {
  const std::string_view command = argv[1];
  if (command == "init") {
    return init(argc, argv);
  }
  if (command == "serve") {
    return serve(argc, argv);
  }
  if (is_record_command(command)) {
    return record_command(argc, argv);
  }
  if (command == "migrate") {
    return migrate(argc, argv);
  }
  throw UsageError("unknown command \"" + std::string(command) + "\"");
}

}  // namespace

int run_cli(int argc, char** argv) {
  if (argc < 2 || std::string_view(argv[1]) == "--help") {
    std::cout << kUsage;
    return argc < 2 ? 2 : 0;
  }
  if (std::string_view(argv[1]) == "--version") {
    std::cout << "garm-edge-hub " GARM_EDGE_VERSION "\n";
    return 0;
  }
  try {
    return dispatch(argc, argv);
  } catch (const UsageError& e) {
    std::cerr << "garm-edge-hub: " << e.what() << "\n\n" << kUsage;
    return 2;
  } catch (const std::invalid_argument& e) {
    std::cerr << "garm-edge-hub: a number was expected: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "garm-edge-hub: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace garm_edge::hub
