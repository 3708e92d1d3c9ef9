#include "provider/commands.hpp"

#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <sys/stat.h>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/hex.hpp"
#include "net/https_client.hpp"
#include "net/tls_config.hpp"
#include "provider/provider_config.hpp"
#include "wire/base64.hpp"
#include "wire/bootstrap.hpp"
#include "wire/error.hpp"
#include "wire/json_fields.hpp"
#include "wire/provider_instance.hpp"
#include "wire/schemas.hpp"
#include "wire/validate.hpp"

#ifndef GARM_EDGE_VERSION
#define GARM_EDGE_VERSION "0.0.0"
#endif

namespace garm_edge::provider {
namespace {

/// A failure to report on stderr with an exit code (1, or 30 for "not found").
struct CommandFailure : std::runtime_error {
  CommandFailure(int code, const std::string& message)
      : std::runtime_error(message), exit_code(code) {}
  int exit_code;
};

std::string percent_encode(const std::string& segment) {
  std::string out;
  for (const char c : segment) {
    const auto byte = static_cast<unsigned char>(c);
    const bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                       c == '-' || c == '.' || c == '_' || c == '~';
    if (plain) {
      out += c;
    } else {
      out += '%';
      append_hex(out, byte, HexCase::upper);  // RFC 3986 2.1
    }
  }
  return out;
}

/// One agent as this process talks to it.
class Agent {
 public:
  Agent(const AgentEndpoint& endpoint, const ProviderConfig& config)
      : endpoint_(endpoint), config_(config) {}

  const std::string& name() const { return endpoint_.name; }

  net::HttpsResponse call(const std::string& method, const std::string& path,
                          const std::string& body = "", bool long_running = false) {
    if (!tls_) {
      tls_ =
          net::TlsConfig::load(net::TlsConfig::Role::client, {.ca = endpoint_.ca,
                                                              .crl = "",
                                                              .certificate = endpoint_.certificate,
                                                              .key = endpoint_.key});
    }
    net::HttpsClientOptions options;
    options.connect_timeout = config_.connect_timeout;
    options.request_timeout = long_running ? config_.create_timeout : config_.request_timeout;
    if (!config_.session_dir.empty()) {
      // Private to garm's user; a directory that cannot be made just means full handshakes.
      ::mkdir(config_.session_dir.c_str(), 0700);
      options.session_file = config_.session_dir / (endpoint_.name + ".tls-session");
    }
    try {
      return net::HttpsClient(net::parse_https_url(endpoint_.url), tls_, options)
          .request(method, path, body);
    } catch (const net::HttpsError& e) {
      throw CommandFailure(1, "agent " + endpoint_.name + " (" + endpoint_.url + "): " + e.what());
    }
  }

  /// The agent's error message for a non-200 answer.
  std::string describe(const net::HttpsResponse& response) const {
    std::string message = "HTTP " + std::to_string(response.status);
    try {
      const auto body = nlohmann::json::parse(response.body);
      message = body.value("message", message) + " (" + body.value("code", std::string("error")) +
                ", HTTP " + std::to_string(response.status) + ")";
    } catch (const nlohmann::json::exception&) {
    }
    return "agent " + endpoint_.name + ": " + message;
  }

 private:
  const AgentEndpoint& endpoint_;
  const ProviderConfig& config_;
  std::shared_ptr<const net::TlsConfig> tls_;
};

class Provider {
 public:
  Provider(const std::map<std::string, std::string>& environment, ProviderConfig config)
      : env_(environment), config_(std::move(config)) {
    for (const auto& endpoint : config_.agents) {
      agents_.push_back(std::make_unique<Agent>(endpoint, config_));
    }
    controller_ = get("GARM_CONTROLLER_ID");
    try {
      wire::validate_uuid(controller_, "GARM_CONTROLLER_ID");
    } catch (const wire::WireError& e) {
      throw CommandFailure(1, e.what());
    }
  }

  Outcome create(const std::string& stdin_text) {
    wire::BootstrapInstance bootstrap;
    try {
      bootstrap = wire::parse_bootstrap_instance(stdin_text);
    } catch (const wire::WireError& e) {
      throw CommandFailure(
          1, std::string("CreateInstance: stdin is not a usable BootstrapInstance: ") + e.what());
    }
    auto& agent = *agents_.front();  // placement across several agents comes with the fleet work
    const auto response = agent.call("POST", controller_path() + "/instances",
                                     wire::to_go_json_text(wire::to_json(bootstrap)), true);
    if (response.status != 200) {
      throw CommandFailure(1, agent.describe(response));
    }
    return {0, print_instance(agent, response.body), ""};
  }

  Outcome get_instance() {
    for (const auto& [agent, ref] : route(get("GARM_INSTANCE_ID"))) {
      const auto response =
          agent->call("GET", controller_path() + "/instances/" + percent_encode(ref));
      if (response.status == 200) {
        return {0, print_instance(*agent, response.body), ""};
      }
      if (response.status != 404) {
        throw CommandFailure(1, agent->describe(response));
      }
    }
    throw CommandFailure(kExitNotFound, "no instance " + get("GARM_INSTANCE_ID"));
  }

  Outcome delete_instance() {
    // Absent everywhere is success: garm deletes by name after failed creates.
    for (const auto& [agent, ref] : route(get("GARM_INSTANCE_ID"))) {
      const auto response =
          agent->call("DELETE", controller_path() + "/instances/" + percent_encode(ref));
      if (response.status != 200) {
        throw CommandFailure(1, agent->describe(response));
      }
    }
    return {0, "", ""};
  }

  Outcome start_or_stop(bool start) {
    const std::string action = start ? "/start" : "/stop?force=true";
    for (const auto& [agent, ref] : route(get("GARM_INSTANCE_ID"))) {
      const auto response =
          agent->call("POST", controller_path() + "/instances/" + percent_encode(ref) + action);
      if (response.status == 200) {
        return {0, "", ""};
      }
      if (response.status != 404) {
        throw CommandFailure(1, agent->describe(response));
      }
    }
    throw CommandFailure(kExitNotFound, "no instance " + get("GARM_INSTANCE_ID"));
  }

  Outcome list_instances() {
    const auto pool = get("GARM_POOL_ID");
    nlohmann::ordered_json all = nlohmann::ordered_json::array();
    for (const auto& agent : agents_) {  // complete from every agent, or a failure: never partial
      const auto response =
          agent->call("GET", controller_path() + "/pools/" + percent_encode(pool) + "/instances");
      if (response.status != 200) {
        throw CommandFailure(1, agent->describe(response));
      }
      for (auto instance : wire::parse_provider_instance_list(response.body)) {
        all.push_back(wire::to_json(checked_for_garm(*agent, std::move(instance))));
      }
    }
    return {0, wire::to_go_json_text(all), ""};
  }

  Outcome remove_all() {
    for (const auto& agent : agents_) {
      const auto response = agent->call("DELETE", controller_path() + "/instances", "", true);
      if (response.status != 200) {
        throw CommandFailure(1, agent->describe(response));
      }
    }
    return {0, "", ""};
  }

 private:
  std::string get(const std::string& name) const {
    const auto it = env_.find(name);
    return it == env_.end() ? std::string() : it->second;
  }

  std::string controller_path() const { return "/v1/controllers/" + controller_; }

  /// "<agent>:<uuid>" goes to that agent; a bare instance name (garm's fallback before it has
  /// a provider ID) is asked of every agent.
  std::vector<std::pair<Agent*, std::string>> route(const std::string& instance_id) const {
    if (instance_id.empty()) {
      throw CommandFailure(1, "GARM_INSTANCE_ID is not set");
    }
    const auto colon = instance_id.rfind(':');
    if (colon != std::string::npos && wire::is_uuid(instance_id.substr(colon + 1))) {
      for (const auto& agent : agents_) {
        if (agent->name() == instance_id.substr(0, colon)) {
          return {{agent.get(), instance_id.substr(colon + 1)}};
        }
      }
      // Not "not found": garm would drop its record while the VM lives on an agent this config
      // no longer names.
      throw CommandFailure(1, "provider ID " + instance_id + " names no configured agent");
    }
    std::vector<std::pair<Agent*, std::string>> all;
    for (const auto& agent : agents_) {
      all.emplace_back(agent.get(), instance_id);
    }
    return all;
  }

  /// garm rejects an instance without name, provider ID or one of its four statuses; one bad
  /// element fails a whole list, so refuse here with a clear message instead.
  static wire::ProviderInstance checked_for_garm(const Agent& agent,
                                                 wire::ProviderInstance instance) {
    if (!instance.status || !wire::is_reportable_by_provider(*instance.status) ||
        instance.name.empty() || instance.provider_id.empty()) {
      throw CommandFailure(1, "agent " + agent.name() + " answered an instance garm would reject");
    }
    instance.provider_id = agent.name() + ":" + instance.provider_id;
    return instance;
  }

  static std::string print_instance(const Agent& agent, const std::string& body) {
    return wire::to_go_json_text(
        wire::to_json(checked_for_garm(agent, wire::parse_provider_instance(body))));
  }

  const std::map<std::string, std::string>& env_;
  ProviderConfig config_;
  std::vector<std::unique_ptr<Agent>> agents_;
  std::string controller_;
};

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
  Provider provider(env, load_provider_config(config_file));
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
