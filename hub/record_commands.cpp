// The hub's record commands, on whichever store runs them: the CLI's (a database, or a stopped
// hub's files) or the running hub's, for the CLI on its admin socket.

#include "hub/record_commands.hpp"

#include <algorithm>
#include <sstream>

#include "common/command_line.hpp"
#include "common/unix_time.hpp"
#include "wire/identity.hpp"
#include "wire/join_token.hpp"

namespace garm_edge::hub {
namespace {

struct RecordCommand {
  HubStore& store;
  const HubConfig& config;
  std::ostream& out;
  std::ostream& err;
};

int token(RecordCommand& context, int argc, char** argv) {
  if (argc < 3) {
    throw UsageError("token needs create, list or revoke");
  }
  const std::string_view action = argv[2];
  if (action == "create") {
    const Options options(argc, argv,
                          {"--config", "--ttl-seconds", "--uses", "--label", "--name",
                           "--name-pattern", "--dns", "--ip"},
                          3);
    const auto& config = context.config;
    auto& store = context.store;
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
    context.out << wire::JoinToken{.hub_url = config.url,
                                   .ca_fingerprint = store.ca_fingerprint(),
                                   .id = record.id,
                                   .secret = secret}
                       .encode()
                << "\n";
    context.err
        << "token " << record.id << " for " << record.host.describe() << ": " << uses
        << " use(s), valid " << ttl
        << " s; on a new host: garm-edge-agent join TOKEN --config /etc/garm-edge/agent.toml\n";
    return 0;
  }
  if (action == "list") {
    const Options options(argc, argv, {"--config"}, 3);
    const auto& store = context.store;
    const auto now = unix_now();
    context.out << "ID                USES LEFT  EXPIRES IN  FOR  LABELS\n";
    for (const auto& record : store.tokens()) {
      context.out << record.id << "  " << record.uses_left << "          "
                  << (record.expires_at > now ? std::to_string(record.expires_at - now) + " s"
                                              : std::string("expired"))
                  << "  " << record.host.describe() << "  ";
      for (const auto& label : record.labels) {
        context.out << label << " ";
      }
      context.out << "\n";
    }
    return 0;
  }
  if (action == "revoke" && argc >= 4) {
    const Options options(argc, argv, {"--config"}, 4);
    auto& store = context.store;
    if (!store.revoke_token(argv[3])) {
      context.err << "garm-edge-hub: no token " << argv[3] << "\n";
      return 1;
    }
    return 0;
  }
  throw UsageError("token needs create, list or revoke ID");
}

int agents(RecordCommand& context, int argc, char** argv) {
  const Options options(argc, argv, {"--config"});
  const auto& store = context.store;
  const auto now = unix_now();
  context.out << "NAME                             CERTIFICATE EXPIRES IN  LABELS\n";
  for (const auto& agent : store.agents()) {
    std::int64_t not_after = 0;
    for (const auto& certificate : agent.certificates) {
      not_after = std::max(not_after, certificate.not_after);
    }
    std::string name = agent.name;
    name.resize(std::max<std::size_t>(name.size(), 32), ' ');
    context.out << name << " " << (not_after - now) / 86400 << " days             ";
    for (const auto& label : agent.labels) {
      context.out << label << " ";
    }
    context.out << "\n";
  }
  return 0;
}

int remove(RecordCommand& context, int argc, char** argv) {
  if (argc < 3) {
    throw UsageError("remove needs an agent name");
  }
  const Options options(argc, argv, {"--config"}, 3);
  auto& store = context.store;
  if (!store.remove(argv[2], unix_now())) {
    context.err << "garm-edge-hub: no agent " << argv[2] << "\n";
    return 1;
  }
  context.out << "removed " << argv[2]
              << " and revoked its certificates: its tunnels close within a second, and "
              << store.crl_path().string()
              << " names them for agents and providers reached directly; it must join again to "
                 "come back\n";
  return 0;
}

int issue_client(RecordCommand& context, int argc, char** argv) {
  if (argc < 3) {
    throw UsageError("issue-client needs a name");
  }
  const Options options(argc, argv, {"--config", "--role"}, 3);
  const auto role_name = options.get("--role").value_or("client");
  if (role_name != "client" && role_name != "metrics") {
    throw UsageError("--role is client or metrics");
  }
  auto& store = context.store;
  const auto files = store.issue_client(
      argv[2], role_name == "metrics" ? wire::Role::metrics : wire::Role::client);
  context.out << "wrote " << files.certificate.string() << " and " << files.key.string() << "\n";
  return 0;
}

int revoke_client(RecordCommand& context, int argc, char** argv) {
  if (argc < 3) {
    throw UsageError("revoke-client needs a name");
  }
  const Options options(argc, argv, {"--config"}, 3);
  auto& store = context.store;
  if (!store.revoke_client(argv[2], unix_now())) {
    context.err << "garm-edge-hub: no client certificate " << argv[2] << "\n";
    return 1;
  }
  context.out << "revoked client " << argv[2] << "; " << store.crl_path().string() << " names it\n";
  return 0;
}

int revoked(RecordCommand& context, int argc, char** argv) {
  const Options options(argc, argv, {"--config"});
  const auto& store = context.store;
  context.out
      << "SERIAL                            HOLDER                    REVOKED AT  EXPIRES AT\n";
  for (const auto& record : store.revoked()) {
    context.out << record.serial << "  " << record.holder << "  " << record.revoked_at << "  "
                << record.not_after << "\n";
  }
  return 0;
}

int dispatch(RecordCommand& context, int argc, char** argv) {
  const std::string_view command = argv[1];
  if (command == "token") {
    return token(context, argc, argv);
  }
  if (command == "agents") {
    return agents(context, argc, argv);
  }
  if (command == "remove") {
    return remove(context, argc, argv);
  }
  if (command == "issue-client") {
    return issue_client(context, argc, argv);
  }
  if (command == "revoke-client") {
    return revoke_client(context, argc, argv);
  }
  return revoked(context, argc, argv);
}

}  // namespace

bool is_record_command(std::string_view command) {
  return command == "token" || command == "agents" || command == "remove" ||
         command == "issue-client" || command == "revoke-client" || command == "revoked";
}

RecordCommandResult run_record_command(HubStore& store, const HubConfig& config,
                                       const std::vector<std::string>& arguments,
                                       std::string_view usage) {
  std::ostringstream out;
  std::ostringstream err;
  RecordCommand context{.store = store, .config = config, .out = out, .err = err};
  // As main's argv: the program, then the command line from the command on.
  std::vector<std::string> words{"garm-edge-hub"};
  words.insert(words.end(), arguments.begin(), arguments.end());
  std::vector<char*> argv;
  for (auto& word : words) {
    argv.push_back(word.data());
  }
  argv.push_back(nullptr);
  int code = 1;
  try {
    if (arguments.empty() || !is_record_command(arguments.front())) {
      throw UsageError("not a command on the hub's records");
    }
    code = dispatch(context, static_cast<int>(words.size()), argv.data());
  } catch (const UsageError& e) {
    err << "garm-edge-hub: " << e.what() << "\n\n" << usage;
    code = 2;
  } catch (const std::invalid_argument& e) {
    err << "garm-edge-hub: a number was expected: " << e.what() << "\n";
    code = 2;
  } catch (const std::exception& e) {
    err << "garm-edge-hub: " << e.what() << "\n";
    code = 1;
  }
  return {.exit_code = code, .out = out.str(), .err = err.str()};
}

}  // namespace garm_edge::hub
