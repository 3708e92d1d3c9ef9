#include "provider/hubs.hpp"

#include <future>
#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include "common/text.hpp"
#include "net/https_client.hpp"
#include "wire/validate.hpp"

namespace garm_edge::provider {
namespace {

AgentEndpoint endpoint_for(const HubEndpoint& hub, const nlohmann::json& agent) {
  const auto name = agent.at("name").get<std::string>();
  if (!wire::is_agent_name(name)) {
    throw HubError("hub " + hub.name + " lists an agent named \"" + printable_excerpt(name) +
                   "\", which is no agent name");
  }
  AgentEndpoint::HubView view{.connected = agent.value("connected", false),
                              .tunnels = agent.value("tunnels", std::size_t{0}),
                              .last_seen = agent.value("last_seen", std::string()),
                              .version = agent.value("version", std::string()),
                              .features = agent.value("features", std::vector<std::string>{})};
  return {.name = name,
          .url = hub.url,
          .ca = hub.ca,
          .certificate = hub.certificate,
          .key = hub.key,
          .weight = hub.weight,
          .labels = agent.value("labels", std::vector<std::string>{}),
          .hub = hub.name,
          .path_prefix = "/v1/agents/" + name + "/relay",
          .via_hub = std::move(view)};
}

std::string fetch_agents(const HubEndpoint& hub, TlsConfigCache& tls,
                         std::chrono::steady_clock::time_point deadline,
                         const std::filesystem::path& session_dir) {
  const AgentEndpoint as_endpoint{.name = hub.name,
                                  .url = hub.url,
                                  .ca = hub.ca,
                                  .certificate = hub.certificate,
                                  .key = hub.key,
                                  .weight = hub.weight,
                                  .labels = {}};
  try {
    net::HttpsClientOptions options;
    options.deadline = deadline;
    if (!session_dir.empty()) {
      // A resumed session saves the hub list its full handshake: most of what the hub adds.
      ::mkdir(session_dir.c_str(), 0700);
      options.session_file = session_dir / ("hub-" + hub.name + ".tls-session");
    }
    const auto response =
        net::HttpsClient(net::parse_https_url(hub.url), tls.get(as_endpoint), options)
            .request("GET", "/v1/agents");
    if (response.status != 200) {
      throw HubError("HTTP " + std::to_string(response.status) + ": " +
                     printable_excerpt(response.body, 512));
    }
    return response.body;
  } catch (const std::exception& e) {
    throw HubError("hub " + hub.name + " (" + hub.url + "): " + e.what());
  }
}

}  // namespace

std::vector<AgentEndpoint> hub_agents_from_json(const HubEndpoint& hub, const std::string& body) {
  try {
    const auto parsed = nlohmann::json::parse(body);
    std::vector<AgentEndpoint> agents;
    for (const auto& agent : parsed.at("agents")) {
      agents.push_back(endpoint_for(hub, agent));
    }
    return agents;
  } catch (const nlohmann::json::exception& e) {
    throw HubError("hub " + hub.name + " answered a list that is not one: " + e.what());
  }
}

ProviderConfig with_hub_agents(ProviderConfig config, TlsConfigCache& tls,
                               std::chrono::steady_clock::time_point deadline) {
  std::vector<std::future<std::string>> answers;
  for (const auto& hub : config.hubs) {
    answers.push_back(std::async(std::launch::async, [&hub, &tls, deadline, &config] {
      return fetch_agents(hub, tls, deadline, config.session_dir);
    }));
  }
  for (std::size_t i = 0; i < config.hubs.size(); ++i) {
    for (auto& agent : hub_agents_from_json(config.hubs[i], answers[i].get())) {
      if (config.find_agent(agent.name) == nullptr) {
        config.agents.push_back(std::move(agent));
      }
    }
  }
  return config;
}

ProviderConfig load_fleet_config(const std::filesystem::path& path) {
  auto config = load_provider_config(path);
  if (config.hubs.empty()) {
    return config;
  }
  TlsConfigCache tls;
  const auto deadline = std::chrono::steady_clock::now() + config.probe_timeout;
  return with_hub_agents(std::move(config), tls, deadline);
}

}  // namespace garm_edge::provider
