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
#include "hub/state_migration.hpp"
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
that dial in (docs/fleet.md).

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

int token(int argc, char** argv) {
  if (argc < 3) {
    throw UsageError("token needs create, list or revoke");
  }
  const std::string_view action = argv[2];
  if (action == "create") {
    const Options options(argc, argv,
                          {"--config", "--ttl-seconds", "--uses", "--label", "--name",
                           "--name-pattern", "--dns", "--ip"},
                          3);
    const auto config = load_hub_config(options.require("--config"));
    auto store = open_hub_store(config);
    const auto ttl = std::stol(options.get("--ttl-seconds").value_or("3600"));
    const auto uses = std::stoul(options.get("--uses").value_or("1"));
    if (ttl < 1 || ttl > 30L * 86400 || uses < 1 || uses > 10000) {
      throw UsageError("--ttl-seconds must be 1-2592000 and --uses 1-10000");
    }
    for (const auto& label : options.get_all("--label")) {
      if (label.empty() || label.size() > 64 ||
          label.find_first_not_of(
              "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") !=
              std::string::npos) {
        throw UsageError("a label is 1-64 of [A-Za-z0-9._-]");
      }
    }
    const auto [record, secret] = store.create_token(
        std::chrono::seconds(ttl), static_cast<unsigned>(uses), options.get_all("--label"),
        {.name = options.get("--name").value_or(""),
         .name_pattern = options.get("--name-pattern").value_or(""),
         .dns_names = options.get_all("--dns"),
         .ip_addresses = options.get_all("--ip")},
        unix_now());
    std::cout << wire::JoinToken{.hub_url = config.url,
                                 .ca_fingerprint = store.ca_fingerprint(),
                                 .id = record.id,
                                 .secret = secret}
                     .encode()
              << "\n";
    std::cerr
        << "token " << record.id << " for " << record.host.describe() << ": " << uses
        << " use(s), valid " << ttl
        << " s; on a new host: garm-edge-agent join TOKEN --config /etc/garm-edge/agent.toml\n";
    return 0;
  }
  if (action == "list") {
    const Options options(argc, argv, {"--config"}, 3);
    const auto store = open_hub_store(load_hub_config(options.require("--config")));
    const auto now = unix_now();
    std::cout << "ID                USES LEFT  EXPIRES IN  FOR  LABELS\n";
    for (const auto& record : store.tokens()) {
      std::cout << record.id << "  " << record.uses_left << "          "
                << (record.expires_at > now ? std::to_string(record.expires_at - now) + " s"
                                            : std::string("expired"))
                << "  " << record.host.describe() << "  ";
      for (const auto& label : record.labels) {
        std::cout << label << " ";
      }
      std::cout << "\n";
    }
    return 0;
  }
  if (action == "revoke" && argc >= 4) {
    const Options options(argc, argv, {"--config"}, 4);
    auto store = open_hub_store(load_hub_config(options.require("--config")));
    if (!store.revoke_token(argv[3])) {
      std::cerr << "garm-edge-hub: no token " << argv[3] << "\n";
      return 1;
    }
    return 0;
  }
  throw UsageError("token needs create, list or revoke ID");
}

int agents(int argc, char** argv) {
  const Options options(argc, argv, {"--config"});
  const auto store = open_hub_store(load_hub_config(options.require("--config")));
  const auto now = unix_now();
  std::cout << "NAME                             CERTIFICATE EXPIRES IN  LABELS\n";
  for (const auto& agent : store.agents()) {
    std::int64_t not_after = 0;
    for (const auto& certificate : agent.certificates) {
      not_after = std::max(not_after, certificate.not_after);
    }
    std::string name = agent.name;
    name.resize(std::max<std::size_t>(name.size(), 32), ' ');
    std::cout << name << " " << (not_after - now) / 86400 << " days             ";
    for (const auto& label : agent.labels) {
      std::cout << label << " ";
    }
    std::cout << "\n";
  }
  return 0;
}

int remove(int argc, char** argv) {
  if (argc < 3) {
    throw UsageError("remove needs an agent name");
  }
  const Options options(argc, argv, {"--config"}, 3);
  auto store = open_hub_store(load_hub_config(options.require("--config")));
  if (!store.remove(argv[2], unix_now())) {
    std::cerr << "garm-edge-hub: no agent " << argv[2] << "\n";
    return 1;
  }
  std::cout << "removed " << argv[2]
            << " and revoked its certificates: its tunnels close within a second, and "
            << store.crl_path().string()
            << " names them for agents and providers reached directly; it must join again to "
               "come back\n";
  return 0;
}

int issue_client(int argc, char** argv) {
  if (argc < 3) {
    throw UsageError("issue-client needs a name");
  }
  const Options options(argc, argv, {"--config", "--role"}, 3);
  const auto role_name = options.get("--role").value_or("client");
  if (role_name != "client" && role_name != "metrics") {
    throw UsageError("--role is client or metrics");
  }
  auto store = open_hub_store(load_hub_config(options.require("--config")));
  const auto files = store.issue_client(
      argv[2], role_name == "metrics" ? wire::Role::metrics : wire::Role::client);
  std::cout << "wrote " << files.certificate.string() << " and " << files.key.string() << "\n";
  return 0;
}

int revoke_client(int argc, char** argv) {
  if (argc < 3) {
    throw UsageError("revoke-client needs a name");
  }
  const Options options(argc, argv, {"--config"}, 3);
  auto store = open_hub_store(load_hub_config(options.require("--config")));
  if (!store.revoke_client(argv[2], unix_now())) {
    std::cerr << "garm-edge-hub: no client certificate " << argv[2] << "\n";
    return 1;
  }
  std::cout << "revoked client " << argv[2] << "; " << store.crl_path().string() << " names it\n";
  return 0;
}

int revoked(int argc, char** argv) {
  const Options options(argc, argv, {"--config"});
  const auto store = open_hub_store(load_hub_config(options.require("--config")));
  std::cout
      << "SERIAL                            HOLDER                    REVOKED AT  EXPIRES AT\n";
  for (const auto& record : store.revoked()) {
    std::cout << record.serial << "  " << record.holder << "  " << record.revoked_at << "  "
              << record.not_after << "\n";
  }
  return 0;
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
  if (command == "token") {
    return token(argc, argv);
  }
  if (command == "agents") {
    return agents(argc, argv);
  }
  if (command == "remove") {
    return remove(argc, argv);
  }
  if (command == "issue-client") {
    return issue_client(argc, argv);
  }
  if (command == "revoke-client") {
    return revoke_client(argc, argv);
  }
  if (command == "revoked") {
    return revoked(argc, argv);
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
