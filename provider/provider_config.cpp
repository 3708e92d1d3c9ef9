#include "provider/provider_config.hpp"

#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>

#include <toml++/toml.h>

#include "common/toml_guard.hpp"

namespace garm_edge::provider {
namespace {

[[noreturn]] void fail(const std::string& source, const toml::node* node,
                       const std::string& problem) {
  std::ostringstream message;
  message << source;
  if (node != nullptr && node->source().begin.line > 0) {
    message << ":" << node->source().begin.line;
  }
  message << ": " << problem;
  throw std::runtime_error(message.str());
}

std::string required_string(const toml::table& table, const std::string& key,
                            const std::string& source, const std::string& where) {
  const auto* node = table.get(key);
  const auto value = node != nullptr ? node->value<std::string>() : std::nullopt;
  if (!value || value->empty()) {
    fail(source, node, where + ": " + key + " is required (a string)");
  }
  return *value;
}

std::filesystem::path required_path(const toml::table& table, const std::string& key,
                                    const std::string& source, const std::string& where) {
  const auto value = required_string(table, key, source, where);
  if (value.front() != '/') {
    fail(source, table.get(key), where + ": " + key + " must be an absolute path");
  }
  return value;
}

void reject_unknown(const toml::table& table, const std::set<std::string>& known,
                    const std::string& source, const std::string& where) {
  for (const auto& [key, value] : table) {
    if (known.count(std::string(key.str())) == 0) {
      fail(source, &value, where + ": unknown key \"" + std::string(key.str()) + "\"");
    }
  }
}

bool is_agent_name(const std::string& name) {
  return !name.empty() && name.size() <= 64 &&
         name.find_first_not_of(
             "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") ==
             std::string::npos;
}

std::chrono::milliseconds seconds_or(const toml::table& table, const std::string& key,
                                     std::chrono::milliseconds fallback,
                                     const std::string& source) {
  const auto* node = table.get(key);
  if (node == nullptr) {
    return fallback;
  }
  const auto value = node->value<std::int64_t>();
  if (!value || *value < 1 || *value > 3600) {
    fail(source, node, "[timeouts]: " + key + " must be 1 to 3600 seconds");
  }
  return std::chrono::seconds(*value);
}

}  // namespace

const AgentEndpoint* ProviderConfig::find_agent(const std::string& name) const {
  for (const auto& agent : agents) {
    if (agent.name == name) {
      return &agent;
    }
  }
  return nullptr;
}

ProviderConfig parse_provider_config(const std::string& text, const std::string& source) {
  if (const auto found = find_unreadable_toml_character(text)) {
    throw std::runtime_error(describe_unreadable_toml_character(source, *found));
  }
  toml::table document;
  try {
    document = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    throw std::runtime_error(source + ":" + std::to_string(e.source().begin.line) + ": " +
                             std::string(e.description()));
  }
  reject_unknown(document, {"agents", "timeouts", "session_dir"}, source, "top level");
  ProviderConfig config;
  const auto* agents = document.get("agents");
  if (agents == nullptr || !agents->is_array_of_tables() || agents->as_array()->empty()) {
    fail(source, agents, "at least one [[agents]] entry is required");
  }
  for (std::size_t i = 0; i < agents->as_array()->size(); ++i) {
    const auto& table = *agents->as_array()->get(i)->as_table();
    const auto where = "[[agents]] #" + std::to_string(i + 1);
    reject_unknown(table, {"name", "url", "ca", "certificate", "key"}, source, where);
    AgentEndpoint agent{.name = required_string(table, "name", source, where),
                        .url = required_string(table, "url", source, where),
                        .ca = required_path(table, "ca", source, where),
                        .certificate = required_path(table, "certificate", source, where),
                        .key = required_path(table, "key", source, where)};
    if (!is_agent_name(agent.name) || config.find_agent(agent.name) != nullptr) {
      fail(source, table.get("name"), where + ": name must be unique and 1-64 of [A-Za-z0-9._-]");
    }
    config.agents.push_back(std::move(agent));
  }
  if (const auto* timeouts = document.get_as<toml::table>("timeouts")) {
    reject_unknown(*timeouts, {"connect_seconds", "request_seconds", "create_seconds"}, source,
                   "[timeouts]");
    config.connect_timeout =
        seconds_or(*timeouts, "connect_seconds", config.connect_timeout, source);
    config.request_timeout =
        seconds_or(*timeouts, "request_seconds", config.request_timeout, source);
    config.create_timeout = seconds_or(*timeouts, "create_seconds", config.create_timeout, source);
  }
  if (const auto* dir = document.get("session_dir")) {
    const auto value = dir->value<std::string>();
    if (!value || value->empty() || value->front() != '/') {
      fail(source, dir, "session_dir must be an absolute path");
    }
    config.session_dir = *value;
  }
  return config;
}

ProviderConfig load_provider_config(const std::filesystem::path& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    throw std::runtime_error(path.string() + ": cannot open the provider config");
  }
  std::ostringstream text;
  text << file.rdbuf();
  return parse_provider_config(text.str(), path.string());
}

std::string provider_config_json_schema() {
  return R"json({"$schema":"http://json-schema.org/draft-07/schema#","title":"garm-provider-edge config (TOML)",)json"
         R"json("type":"object","required":["agents"],"additionalProperties":false,"properties":{)json"
         R"json("agents":{"type":"array","minItems":1,"items":{"type":"object","additionalProperties":false,)json"
         R"json("required":["name","url","ca","certificate","key"],"properties":{)json"
         R"json("name":{"type":"string","pattern":"^[A-Za-z0-9._-]{1,64}$"},)json"
         R"json("url":{"type":"string","pattern":"^https://"},"ca":{"type":"string"},)json"
         R"json("certificate":{"type":"string"},"key":{"type":"string"}}}},)json"
         R"json("timeouts":{"type":"object","additionalProperties":false,"properties":{)json"
         R"json("connect_seconds":{"type":"integer","minimum":1,"maximum":3600},)json"
         R"json("request_seconds":{"type":"integer","minimum":1,"maximum":3600},)json"
         R"json("create_seconds":{"type":"integer","minimum":1,"maximum":3600}}},)json"
         R"json("session_dir":{"type":"string"}}})json";
}

}  // namespace garm_edge::provider
