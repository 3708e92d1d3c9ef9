#include "provider/commands.hpp"

#include <optional>
#include <stdexcept>
#include <sys/stat.h>
#include <vector>

#include <nlohmann/json.hpp>

#include "provider/hubs.hpp"
#include "provider/instance_commands.hpp"
#include "provider/provider_config.hpp"
#include "wire/base64.hpp"
#include "wire/error.hpp"
#include "wire/json_fields.hpp"
#include "wire/schemas.hpp"
#include "wire/validate.hpp"

#ifndef GARM_EDGE_VERSION
#define GARM_EDGE_VERSION "0.0.0"
#endif

namespace garm_edge::provider {
namespace {

Outcome validate_pool_info(const std::map<std::string, std::string>& env) {
  const auto it = env.find("GARM_POOL_EXTRASPECS");
  if (it == env.end() || it->second.empty()) {
    return {0, "", ""};
  }
  const auto decoded = wire::base64_decode(it->second);
  if (!decoded) {
    throw CommandFailure(1, "GARM_POOL_EXTRASPECS is not base64");
  }
  const auto specs = wire::parse_json_text(*decoded, "GARM_POOL_EXTRASPECS");
  if (specs.is_null()) {
    return {0, "", ""};
  }
  wire::validate_extra_specs(specs);
  try {
    wire::validate_extra_spec_keys(specs);
  } catch (const wire::WireError& e) {
    throw CommandFailure(1, e.what());
  }
  return {0, "", ""};
}

Outcome run_instance_command(Provider& provider, const std::string& command,
                             const std::function<std::string()>& read_stdin) {
  if (command == "CreateInstance")
    return provider.create(read_stdin());
  if (command == "DeleteInstance")
    return provider.delete_instance();
  if (command == "GetInstance")
    return provider.get_instance();
  if (command == "ListInstances")
    return provider.list_instances();
  if (command == "RemoveAllInstances")
    return provider.remove_all();
  return provider.start_or_stop(command == "StartInstance");
}

/// ListInstances asks every agent the same thing: a hub is asked it with its list of agents.
std::optional<HubPrefetch> hub_prefetch_for(const std::string& command,
                                            const std::map<std::string, std::string>& env,
                                            std::vector<wire::RelayedAnswer>& answers) {
  const auto controller = env.find("GARM_CONTROLLER_ID");
  const auto pool = env.find("GARM_POOL_ID");
  if (command != "ListInstances" || controller == env.end() || pool == env.end()) {
    return std::nullopt;
  }
  try {
    wire::validate_uuid(controller->second, "GARM_CONTROLLER_ID");
  } catch (const wire::WireError&) {
    return std::nullopt;  // refused with its reason before anything is asked
  }
  return HubPrefetch{.method = "GET",
                     .path = list_path(controller->second, pool->second),
                     .timeout = std::chrono::seconds(60),
                     .answers = &answers};
}

Outcome dispatch(const std::map<std::string, std::string>& env,
                 const std::function<std::string()>& read_stdin) {
  const auto find = [&env](const std::string& name) {
    const auto it = env.find(name);
    return it == env.end() ? std::string() : it->second;
  };
  const auto command = find("GARM_COMMAND");
  if (command == "GetVersion") {
    return {0, GARM_EDGE_VERSION, ""};
  }
  if (command == "GetSupportedInterfaceVersions") {
    return {0, R"(["v0.1.0","v0.1.1"])", ""};
  }
  if (command == "GetConfigJSONSchema") {
    return {0, provider_config_json_schema(), ""};
  }
  if (command == "GetExtraSpecsJSONSchema") {
    return {0, wire::extra_specs_json_schema(), ""};
  }
  const auto version = find("GARM_INTERFACE_VERSION");
  if (!version.empty() && version != "v0.1.0" && version != "v0.1.1") {
    throw CommandFailure(1, "unsupported GARM_INTERFACE_VERSION \"" + version + "\"");
  }
  if (command == "ValidatePoolInfo") {
    return validate_pool_info(env);
  }
  static const std::set<std::string> kInstanceCommands = {
      "CreateInstance",     "DeleteInstance", "GetInstance", "ListInstances",
      "RemoveAllInstances", "StartInstance",  "StopInstance"};
  if (kInstanceCommands.count(command) == 0) {
    throw CommandFailure(
        1, command.empty() ? "GARM_COMMAND is not set" : "unknown command \"" + command + "\"");
  }
  const auto config_file = find("GARM_PROVIDER_CONFIG_FILE");
  if (config_file.empty()) {
    throw CommandFailure(1, "GARM_PROVIDER_CONFIG_FILE is not set");
  }
  TlsConfigCache tls;  // one per process: the hub's list and the agents' calls share it
  std::vector<wire::RelayedAnswer> prefetched;
  const auto prefetch = hub_prefetch_for(command, env, prefetched);
  Provider provider(env, load_fleet_config(config_file, tls, prefetch), tls);
  if (prefetch) {
    provider.take_prefetched(*prefetch, prefetched);
  }
  try {
    auto outcome = run_instance_command(provider, command, read_stdin);
    provider.carry_out_deferred_deletes();
    return outcome;
  } catch (...) {
    provider.carry_out_deferred_deletes();
    throw;
  }
}

}  // namespace

Outcome run_command(const std::map<std::string, std::string>& environment,
                    const std::function<std::string()>& read_stdin) {
  try {
    return dispatch(environment, read_stdin);
  } catch (const CommandFailure& e) {
    return {e.exit_code, "", std::string("garm-provider-edge: ") + e.what() + "\n"};
  } catch (const std::exception& e) {
    return {1, "", std::string("garm-provider-edge: ") + e.what() + "\n"};
  }
}

}  // namespace garm_edge::provider
