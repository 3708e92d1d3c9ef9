#include "provider/hubs.hpp"

#include <future>
#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include "common/text.hpp"
#include "net/https_client.hpp"
#include "wire/join_token.hpp"
#include "wire/validate.hpp"

namespace garm_edge::provider {
namespace {

/// The hub as an endpoint of the provider's client: its URL and the provider's certificate
/// for it. Agents behind the hub are reached at the same endpoint, under their relay path.
AgentEndpoint hub_as_endpoint(const HubEndpoint& hub, std::string name) {
  return {.name = std::move(name),
          .url = hub.url,
          .ca = hub.ca,
          .certificate = hub.certificate,
          .key = hub.key,
          .crl = hub.crl,
          .require_host_identity = false,
          .weight = hub.weight,
          .labels = {}};
}

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
  auto endpoint = hub_as_endpoint(hub, name);
  endpoint.labels = agent.value("labels", std::vector<std::string>{});
  endpoint.hub = hub.name;
  endpoint.path_prefix = "/v1/agents/" + name + "/relay";
  endpoint.via_hub = std::move(view);
  return endpoint;
}

/// One request to a hub, its errors as HubError.
net::HttpsResponse ask_hub(const HubEndpoint& hub, TlsConfigCache& tls,
                           std::chrono::steady_clock::time_point deadline,
                           const std::filesystem::path& session_dir, const std::string& method,
                           const std::string& path, const std::string& body = "") {
  const auto as_endpoint = hub_as_endpoint(hub, hub.name);
  try {
    net::HttpsClientOptions options;
    options.deadline = deadline;
    options.check_peer = hub_peer();
    if (!session_dir.empty()) {
      // A resumed session saves the hub list its full handshake: most of what the hub adds.
      ::mkdir(session_dir.c_str(), 0700);
      options.session_file = session_dir / ("hub-" + hub.name + ".tls-session");
    }
    return net::HttpsClient(net::parse_https_url(hub.url), tls.get(as_endpoint), options)
        .request(method, path, body);
  } catch (const std::exception& e) {
    throw HubError("hub " + hub.name + " (" + hub.url + "): " + e.what());
  }
}

std::string fetch_agents(const HubEndpoint& hub, TlsConfigCache& tls,
                         std::chrono::steady_clock::time_point deadline,
                         const std::filesystem::path& session_dir) {
  const auto response = ask_hub(hub, tls, deadline, session_dir, "GET", "/v1/agents");
  if (response.status != 200) {
    throw HubError("hub " + hub.name + " (" + hub.url + "): HTTP " +
                   std::to_string(response.status) + ": " + printable_excerpt(response.body, 512));
  }
  return response.body;
}

/// Every agent of `hub` and its answer to the prefetch, in one round trip; nothing from a hub
/// older than /v1/relay (its list is then asked for on its own).
std::optional<std::vector<AgentEndpoint>> fetch_agents_with_answers(
    const HubEndpoint& hub, TlsConfigCache& tls, std::chrono::steady_clock::time_point deadline,
    const std::filesystem::path& session_dir, const HubPrefetch& prefetch,
    std::vector<wire::RelayedAnswer>& answers) {
  const nlohmann::json request = {{"method", prefetch.method},
                                  {"target", prefetch.path},
                                  {"agents", "*"},
                                  {"timeout_ms", prefetch.timeout.count()}};
  const auto response = ask_hub(hub, tls, deadline + prefetch.timeout, session_dir, "POST",
                                "/v1/relay", request.dump());
  if (response.status == 404) {
    return std::nullopt;
  }
  auto framed = response.status == 200 ? wire::parse_relay_framing(response.body) : std::nullopt;
  if (!framed) {
    throw HubError("hub " + hub.name + " (" + hub.url + "): HTTP " +
                   std::to_string(response.status) + ": " + printable_excerpt(response.body, 512));
  }
  std::vector<AgentEndpoint> agents;
  for (auto& answer : *framed) {
    agents.push_back(
        endpoint_for(hub, {{"name", answer.agent}, {"connected", answer.status != 0}}));
    answers.push_back(std::move(answer));
  }
  return agents;
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
                               std::chrono::steady_clock::time_point deadline,
                               const std::optional<HubPrefetch>& prefetch) {
  std::vector<std::future<std::vector<AgentEndpoint>>> lists;
  std::vector<std::vector<wire::RelayedAnswer>> answers(config.hubs.size());
  for (std::size_t i = 0; i < config.hubs.size(); ++i) {
    lists.push_back(std::async(std::launch::async, [&, i] {
      const auto& hub = config.hubs[i];
      if (prefetch) {
        if (auto agents = fetch_agents_with_answers(hub, tls, deadline, config.session_dir,
                                                    *prefetch, answers[i])) {
          return std::move(*agents);
        }
      }
      return hub_agents_from_json(hub, fetch_agents(hub, tls, deadline, config.session_dir));
    }));
  }
  for (std::size_t i = 0; i < config.hubs.size(); ++i) {
    for (auto& agent : lists[i].get()) {
      if (config.find_agent(agent.name) == nullptr) {
        config.agents.push_back(std::move(agent));
      }
    }
  }
  // Answers only for the agents this hub stands for (not one an [[agents]] entry shadows).
  for (std::size_t i = 0; prefetch && i < config.hubs.size(); ++i) {
    for (auto& answer : answers[i]) {
      if (const auto* agent = config.find_agent(answer.agent);
          agent != nullptr && agent->hub == config.hubs[i].name) {
        prefetch->answers->push_back(std::move(answer));
      }
    }
  }
  return config;
}

ProviderConfig load_fleet_config(const std::filesystem::path& path, TlsConfigCache& tls,
                                 const std::optional<HubPrefetch>& prefetch) {
  auto config = load_provider_config(path);
  if (config.hubs.empty()) {
    return config;
  }
  const auto deadline = std::chrono::steady_clock::now() + config.probe_timeout;
  auto fleet = with_hub_agents(std::move(config), tls, deadline, prefetch);
  return fleet;
}

}  // namespace garm_edge::provider
