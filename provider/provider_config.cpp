#include "provider/provider_config.hpp"

#include <algorithm>

#include "common/text.hpp"
#include "common/toml_reader.hpp"
#include "wire/validate.hpp"

namespace garm_edge::provider {
namespace {

using wire::is_agent_name;

std::chrono::milliseconds seconds_or(TomlTableReader& in, std::string_view key,
                                     std::chrono::milliseconds fallback) {
  const auto seconds = in.integer<long>(key, 1, 3600);
  return seconds ? std::chrono::seconds(*seconds) : fallback;
}

/// What every entry takes from the top level unless it says otherwise.
struct EntryDefaults {
  std::filesystem::path crl;
  bool require_host_identity = false;
};

std::filesystem::path crl_or(TomlTableReader& in, const EntryDefaults& defaults) {
  return in.node("crl") != nullptr ? in.absolute_path("crl", true) : defaults.crl;
}

AgentEndpoint read_agent(const toml::table& table, const std::string& source, std::size_t index,
                         const ProviderConfig& config, const EntryDefaults& defaults) {
  TomlTableReader in(table, source, "[[agents]] #" + std::to_string(index + 1));
  AgentEndpoint agent{
      .name = in.required_string("name"),
      .url = in.required_string("url"),
      .ca = in.absolute_path("ca", true),
      .certificate = in.absolute_path("certificate", true),
      .key = in.absolute_path("key", true),
      .crl = crl_or(in, defaults),
      .require_host_identity =
          in.boolean("require_host_identity").value_or(defaults.require_host_identity),
      .weight = in.integer<unsigned>("weight", 1, 1000).value_or(100),
      .labels = in.string_list("labels")};
  if (!is_agent_name(agent.name) || config.find_agent(agent.name) != nullptr) {
    in.fail(in.node("name"), "name must be unique and 1-64 of [A-Za-z0-9._-]");
  }
  in.reject_unknown_keys();
  return agent;
}

/// `url` for one hub, `urls` for the hubs of one database: exactly one of them.
std::vector<std::string> hub_urls(TomlTableReader& in) {
  const bool one = in.node("url") != nullptr;
  const bool several = in.node("urls") != nullptr;
  if (one == several) {
    in.fail(in.node(one ? "urls" : "name"),
            "a hub needs url (one hub) or urls (several hubs on one database), not both");
  }
  if (one) {
    return {in.required_string("url")};
  }
  auto urls = in.string_list("urls");
  constexpr std::size_t kMaxHubUrls = 16;
  if (urls.empty() || urls.size() > kMaxHubUrls ||
      std::any_of(urls.begin(), urls.end(),
                  [](const auto& url) { return !url.starts_with("https://"); })) {
    in.fail(in.node("urls"), "urls must be 1-16 https:// URLs");
  }
  return urls;
}

HubEndpoint read_hub(const toml::table& table, const std::string& source, std::size_t index,
                     const ProviderConfig& config, const EntryDefaults& defaults) {
  TomlTableReader in(table, source, "[[hubs]] #" + std::to_string(index + 1));
  HubEndpoint hub{.name = in.required_string("name"),
                  .urls = hub_urls(in),
                  .ca = in.absolute_path("ca", true),
                  .certificate = in.absolute_path("certificate", true),
                  .key = in.absolute_path("key", true),
                  .weight = in.integer<unsigned>("weight", 1, 1000).value_or(100),
                  .crl = crl_or(in, defaults)};
  const bool taken = std::any_of(config.hubs.begin(), config.hubs.end(),
                                 [&](const auto& other) { return other.name == hub.name; });
  if (!is_agent_name(hub.name) || taken) {
    in.fail(in.node("name"), "name must be unique and 1-64 of [A-Za-z0-9._-]");
  }
  in.reject_unknown_keys();
  return hub;
}

FleetQuota read_quota(const toml::table& table, const std::string& source, std::size_t index,
                      const ProviderConfig& config) {
  TomlTableReader in(table, source, "[[quotas]] #" + std::to_string(index + 1));
  constexpr std::int64_t kMax = std::int64_t{1} << 40;
  FleetQuota quota{
      .controller = ascii_lower(in.required_string("controller")),
      .max_instances = in.integer<std::uint64_t>("max_instances", 0, kMax).value_or(0),
      .max_vcpus = in.integer<std::uint64_t>("max_vcpus", 0, kMax).value_or(0),
      .max_memory_mib = in.integer<std::uint64_t>("max_memory_mib", 0, kMax).value_or(0),
      .max_disk_gib = in.integer<std::uint64_t>("max_disk_gib", 0, kMax).value_or(0)};
  if (!wire::is_uuid(quota.controller) || config.find_quota(quota.controller) != nullptr) {
    in.fail(in.node("controller"), "controller must be a garm controller's UUID, named once");
  }
  in.reject_unknown_keys();
  return quota;
}

}  // namespace

const FleetQuota* ProviderConfig::find_quota(const std::string& controller) const {
  const auto found = std::find_if(quotas.begin(), quotas.end(),
                                  [&](const FleetQuota& q) { return q.controller == controller; });
  return found == quotas.end() ? nullptr : &*found;
}

const AgentEndpoint* ProviderConfig::find_agent(const std::string& name) const {
  for (const auto& agent : agents) {
    if (agent.name == name) {
      return &agent;
    }
  }
  return nullptr;
}

ProviderConfig parse_provider_config(const std::string& text, const std::string& source) {
  const auto document = parse_toml_document(text, source);
  TomlTableReader root(document, source, "top level");
  ProviderConfig config;
  EntryDefaults defaults;
  if (root.node("crl") != nullptr) {
    defaults.crl = root.absolute_path("crl", true);
  }
  defaults.require_host_identity = root.boolean("require_host_identity").value_or(false);
  const auto* agents = root.array_of_tables("agents");
  for (std::size_t i = 0; agents != nullptr && i < agents->size(); ++i) {
    config.agents.push_back(read_agent(*agents->get(i)->as_table(), source, i, config, defaults));
  }
  const auto* hubs = root.array_of_tables("hubs");
  for (std::size_t i = 0; hubs != nullptr && i < hubs->size(); ++i) {
    config.hubs.push_back(read_hub(*hubs->get(i)->as_table(), source, i, config, defaults));
  }
  const auto* quotas = root.array_of_tables("quotas");
  for (std::size_t i = 0; quotas != nullptr && i < quotas->size(); ++i) {
    config.quotas.push_back(read_quota(*quotas->get(i)->as_table(), source, i, config));
  }
  if (config.agents.empty() && config.hubs.empty()) {
    root.fail(agents, "at least one [[agents]] or [[hubs]] entry is required");
  }
  if (const auto placement = root.string("placement")) {
    if (*placement != "spread" && *placement != "pack") {
      root.fail(root.node("placement"), "placement must be spread or pack");
    }
    config.placement = *placement == "pack" ? Placement::pack : Placement::spread;
  }
  if (const auto* timeouts = root.table("timeouts")) {
    TomlTableReader in(*timeouts, source, "[timeouts]");
    config.connect_timeout = seconds_or(in, "connect_seconds", config.connect_timeout);
    config.request_timeout = seconds_or(in, "request_seconds", config.request_timeout);
    config.create_timeout = seconds_or(in, "create_seconds", config.create_timeout);
    config.probe_timeout = seconds_or(in, "probe_seconds", config.probe_timeout);
    in.reject_unknown_keys();
  }
  if (root.node("session_dir") != nullptr) {
    config.session_dir = root.absolute_path("session_dir", true);  // present: not empty either
  }
  root.reject_unknown_keys();
  return config;
}

ProviderConfig load_provider_config(const std::filesystem::path& path) {
  return parse_provider_config(read_config_file(path, "provider config"), path.string());
}

std::string provider_config_json_schema() {
  return R"json({"$schema":"http://json-schema.org/draft-07/schema#","title":"garm-provider-edge config (TOML)",)json"
         R"json("type":"object","additionalProperties":false,"properties":{)json"
         R"json("hubs":{"type":"array","items":{"type":"object","additionalProperties":false,)json"
         R"json("required":["name","ca","certificate","key"],"properties":{)json"
         R"json("name":{"type":"string","pattern":"^[A-Za-z0-9._-]{1,64}$"},)json"
         R"json("url":{"type":"string","pattern":"^https://"},)json"
         R"json("urls":{"type":"array","minItems":1,"maxItems":16,)json"
         R"json("items":{"type":"string","pattern":"^https://"}},"ca":{"type":"string"},)json"
         R"json("certificate":{"type":"string"},"key":{"type":"string"},"crl":{"type":"string"},)json"
         R"json("weight":{"type":"integer","minimum":1,"maximum":1000}}}},)json"
         R"json("agents":{"type":"array","items":{"type":"object","additionalProperties":false,)json"
         R"json("required":["name","url","ca","certificate","key"],"properties":{)json"
         R"json("name":{"type":"string","pattern":"^[A-Za-z0-9._-]{1,64}$"},)json"
         R"json("url":{"type":"string","pattern":"^https://"},"ca":{"type":"string"},)json"
         R"json("certificate":{"type":"string"},"key":{"type":"string"},"crl":{"type":"string"},)json"
         R"json("require_host_identity":{"type":"boolean"},)json"
         R"json("weight":{"type":"integer","minimum":1,"maximum":1000},)json"
         R"json("labels":{"type":"array","items":{"type":"string"}}}}},)json"
         R"json("placement":{"enum":["spread","pack"]},)json"
         R"json("crl":{"type":"string"},"require_host_identity":{"type":"boolean"},)json"
         R"json("timeouts":{"type":"object","additionalProperties":false,"properties":{)json"
         R"json("connect_seconds":{"type":"integer","minimum":1,"maximum":3600},)json"
         R"json("request_seconds":{"type":"integer","minimum":1,"maximum":3600},)json"
         R"json("create_seconds":{"type":"integer","minimum":1,"maximum":3600},)json"
         R"json("probe_seconds":{"type":"integer","minimum":1,"maximum":3600}}},)json"
         R"json("session_dir":{"type":"string"},)json"
         R"json("quotas":{"type":"array","items":{"type":"object","additionalProperties":false,)json"
         R"json("required":["controller"],"properties":{"controller":{"type":"string"},)json"
         R"json("max_instances":{"type":"integer","minimum":0,"maximum":1099511627776},)json"
         R"json("max_vcpus":{"type":"integer","minimum":0,"maximum":1099511627776},)json"
         R"json("max_memory_mib":{"type":"integer","minimum":0,"maximum":1099511627776},)json"
         R"json("max_disk_gib":{"type":"integer","minimum":0,"maximum":1099511627776}}}}}})json";
}

}  // namespace garm_edge::provider
