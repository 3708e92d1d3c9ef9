#include "provider/hubs.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <future>
#include <map>
#include <mutex>
#include <sys/stat.h>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/text.hpp"
#include "net/https_client.hpp"
#include "wire/join_token.hpp"
#include "wire/validate.hpp"

namespace garm_edge::provider {
namespace {

/// The hub at `url` as an endpoint of the provider's client: the URL and the provider's
/// certificate for it. Agents behind the hub are reached at the same endpoint, under their relay
/// path.
AgentEndpoint hub_as_endpoint(const HubEndpoint& hub, const std::string& url, std::string name) {
  return {.name = std::move(name),
          .url = url,
          .ca = hub.ca,
          .certificate = hub.certificate,
          .key = hub.key,
          .crl = hub.crl,
          .require_host_identity = false,
          .weight = hub.weight,
          .labels = {}};
}

AgentEndpoint endpoint_for(const HubEndpoint& hub, const std::string& url,
                           const nlohmann::json& agent) {
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
  auto endpoint = hub_as_endpoint(hub, url, name);
  endpoint.labels = agent.value("labels", std::vector<std::string>{});
  endpoint.hub = hub.name;
  endpoint.path_prefix = "/v1/agents/" + name + "/relay";
  endpoint.via_hub = std::move(view);
  return endpoint;
}

/// One hub process of a [[hubs]] entry, as asked from a thread of its own.
struct HubAtUrl {
  HubEndpoint hub;
  std::string url;
  std::shared_ptr<const net::TlsConfig> tls;
  std::filesystem::path session_dir;
};

/// One request to a hub, its errors as HubError.
net::HttpsResponse ask_hub(const HubAtUrl& at, std::chrono::steady_clock::time_point deadline,
                           const std::string& method, const std::string& path,
                           const std::string& body = "") {
  try {
    net::HttpsClientOptions options;
    options.deadline = deadline;
    options.check_peer = hub_peer();
    if (!at.session_dir.empty()) {
      // A resumed session saves the hub list its full handshake: most of what the hub adds.
      ::mkdir(at.session_dir.c_str(), 0700);
      options.session_file =
          at.session_dir / (hub_session_name(at.hub.name, at.url) + ".tls-session");
    }
    return net::HttpsClient(net::parse_https_url(at.url), at.tls, options)
        .request(method, path, body);
  } catch (const std::exception& e) {
    throw HubError("hub " + at.hub.name + " (" + at.url + "): " + e.what());
  }
}

HubError hub_refusal(const HubAtUrl& at, const net::HttpsResponse& response) {
  return HubError("hub " + at.hub.name + " (" + at.url + "): HTTP " +
                  std::to_string(response.status) + ": " + printable_excerpt(response.body, 512));
}

/// What one hub process gave: every agent of the fleet, reached through it, and its answers to
/// the prefetch.
struct Listing {
  std::vector<AgentEndpoint> agents;
  std::vector<wire::RelayedAnswer> answers;
};

struct Prefetch {
  std::string method;
  std::string path;
  std::chrono::milliseconds timeout;
};

/// The agents and the prefetch's answers in one round trip; nothing from a hub older than
/// /v1/relay (its list is then asked for on its own).
std::optional<Listing> list_with_answers(const HubAtUrl& at,
                                         std::chrono::steady_clock::time_point deadline,
                                         const Prefetch& prefetch) {
  const nlohmann::json request = {{"method", prefetch.method},
                                  {"target", prefetch.path},
                                  {"agents", "*"},
                                  {"timeout_ms", prefetch.timeout.count()}};
  const auto response =
      ask_hub(at, deadline + prefetch.timeout, "POST", "/v1/relay", request.dump());
  if (response.status == 404) {
    return std::nullopt;
  }
  auto framed = response.status == 200 ? wire::parse_relay_framing(response.body) : std::nullopt;
  if (!framed) {
    throw hub_refusal(at, response);
  }
  Listing listing;
  for (auto& answer : *framed) {
    listing.agents.push_back(
        endpoint_for(at.hub, at.url, {{"name", answer.agent}, {"connected", answer.status != 0}}));
    listing.answers.push_back(std::move(answer));
  }
  return listing;
}

Listing list_at(const HubAtUrl& at, std::chrono::steady_clock::time_point deadline,
                const std::optional<Prefetch>& prefetch) {
  if (prefetch) {
    if (auto listing = list_with_answers(at, deadline, *prefetch)) {
      return std::move(*listing);
    }
  }
  const auto response = ask_hub(at, deadline, "GET", "/v1/agents");
  if (response.status != 200) {
    throw hub_refusal(at, response);
  }
  return {.agents = hub_agents_from_json(at.hub, at.url, response.body), .answers = {}};
}

bool connected(const AgentEndpoint& agent) {
  return agent.via_hub && agent.via_hub->connected;
}

/// The listings of one entry's hub processes, asked all at once from threads that may outlive
/// the wait: it ends once every process answered or failed, at the deadline, or as soon as one
/// listing shows every agent connected (no other process could add to it: they share one
/// database), so a hub whose machine died costs no wait while another answers.
class Listings {
 public:
  explicit Listings(std::size_t processes) : results_(processes) {}

  void finish(std::size_t index, std::optional<Listing> listing, std::string error) {
    {
      std::lock_guard lock(mutex_);
      results_[index] = Result{.listing = std::move(listing), .error = std::move(error)};
    }
    done_.notify_all();
  }

  /// By process, in the entry's order: the listing, or nothing and why.
  std::vector<std::pair<std::optional<Listing>, std::string>> wait_until(
      std::chrono::steady_clock::time_point deadline) {
    std::unique_lock lock(mutex_);
    done_.wait_until(lock, deadline, [this] { return all_finished() || one_complete(); });
    std::vector<std::pair<std::optional<Listing>, std::string>> results;
    for (auto& result : results_) {
      if (result) {
        results.emplace_back(std::move(result->listing), std::move(result->error));
      } else {
        results.emplace_back(std::nullopt, "no answer before the deadline");
      }
    }
    return results;
  }

 private:
  struct Result {
    std::optional<Listing> listing;
    std::string error;
  };
  bool all_finished() const {
    return std::all_of(results_.begin(), results_.end(),
                       [](const auto& r) { return r.has_value(); });
  }
  bool one_complete() const {
    return std::any_of(results_.begin(), results_.end(), [](const auto& result) {
      return result && result->listing &&
             std::all_of(result->listing->agents.begin(), result->listing->agents.end(), connected);
    });
  }
  std::mutex mutex_;
  std::condition_variable done_;
  std::vector<std::optional<Result>> results_;
};

/// Every agent of a hub entry once, each through the first of its processes that has a tunnel
/// to it (else the first that listed it), with that process's answer to the prefetch. Throws
/// HubError when no process answered.
Listing merged_listing(std::vector<std::pair<std::optional<Listing>, std::string>> results,
                       const std::vector<std::string>& urls) {
  struct Choice {
    std::size_t process;
    AgentEndpoint agent;
  };
  std::vector<Choice> choices;
  std::map<std::string, std::size_t> chosen;  // agent -> its place in choices
  std::string errors;
  bool any = false;
  for (std::size_t process = 0; process < results.size(); ++process) {
    auto& [listing, error] = results[process];
    if (!listing) {
      errors += (errors.empty() ? "" : "; ") + error;
      continue;
    }
    any = true;
    for (const auto& agent : listing->agents) {  // copied: the loop below reads them again
      const auto found = chosen.find(agent.name);
      if (found == chosen.end()) {
        chosen.emplace(agent.name, choices.size());
        choices.push_back({.process = process, .agent = agent});
      } else if (!connected(choices[found->second].agent) && connected(agent)) {
        choices[found->second] = {.process = process, .agent = agent};
      }
    }
  }
  if (!any) {
    throw HubError(errors);
  }
  // Where else each agent can be reached: the processes that listed it connected first, then
  // every other (one whose answer did not come before the wait ended may still have a tunnel).
  for (auto& choice : choices) {
    auto& others = choice.agent.other_hub_urls;
    const auto add = [&](const std::string& url) {
      if (url != choice.agent.url && std::find(others.begin(), others.end(), url) == others.end()) {
        others.push_back(url);
      }
    };
    for (const auto& [listing, error] : results) {
      for (const auto& agent : listing ? listing->agents : std::vector<AgentEndpoint>{}) {
        if (agent.name == choice.agent.name && connected(agent)) {
          add(agent.url);
        }
      }
    }
    for (const auto& url : urls) {
      add(url);
    }
  }
  Listing merged;
  for (std::size_t process = 0; process < results.size(); ++process) {
    if (!results[process].first) {
      continue;
    }
    for (auto& answer : results[process].first->answers) {
      if (const auto found = chosen.find(answer.agent);
          found != chosen.end() && choices[found->second].process == process) {
        merged.answers.push_back(std::move(answer));
      }
    }
  }
  for (auto& choice : choices) {
    merged.agents.push_back(std::move(choice.agent));
  }
  return merged;
}

/// Listing threads not yet ended: list_hub returns once one listing shows every agent, and
/// leaves a slower hub's thread to end by its deadline.
std::atomic<int> listings_running{0};

struct ListingRunning {
  ListingRunning() = default;
  ListingRunning(const ListingRunning&) = delete;
  ListingRunning& operator=(const ListingRunning&) = delete;
  ~ListingRunning() { --listings_running; }
};

/// One [[hubs]] entry's listing: each of its processes asked at once.
Listing list_hub(const HubEndpoint& hub, TlsConfigCache& tls,
                 std::chrono::steady_clock::time_point deadline,
                 const std::filesystem::path& session_dir,
                 const std::optional<Prefetch>& prefetch) {
  auto listings = std::make_shared<Listings>(hub.urls.size());
  for (std::size_t i = 0; i < hub.urls.size(); ++i) {
    HubAtUrl at{.hub = hub, .url = hub.urls[i], .tls = nullptr, .session_dir = session_dir};
    try {
      at.tls = tls.get(hub_as_endpoint(hub, at.url, hub.name));
    } catch (const std::exception& e) {
      throw HubError("hub " + hub.name + ": " + e.what());  // its certificates: every URL's
    }
    ++listings_running;
    std::thread([listings, i, at = std::move(at), deadline, asked = prefetch]() mutable {
      const ListingRunning counted;  // first made, last gone: after every capture below
      const auto results = std::move(listings);
      const auto reached = std::move(at);
      const auto asking = std::move(asked);
      try {
        results->finish(i, list_at(reached, deadline, asking), {});
      } catch (const std::exception& e) {
        results->finish(i, std::nullopt, e.what());
      }
    }).detach();
  }
  const auto wait = prefetch ? prefetch->timeout : std::chrono::milliseconds(0);
  return merged_listing(listings->wait_until(deadline + wait + std::chrono::milliseconds(500)),
                        hub.urls);
}

}  // namespace

std::vector<AgentEndpoint> hub_agents_from_json(const HubEndpoint& hub, const std::string& url,
                                                const std::string& body) {
  try {
    const auto parsed = nlohmann::json::parse(body);
    std::vector<AgentEndpoint> agents;
    for (const auto& agent : parsed.at("agents")) {
      agents.push_back(endpoint_for(hub, url, agent));
    }
    return agents;
  } catch (const nlohmann::json::exception& e) {
    throw HubError("hub " + hub.name + " (" + url +
                   ") answered a list that is not one: " + e.what());
  }
}

ProviderConfig with_hub_agents(ProviderConfig config, TlsConfigCache& tls,
                               std::chrono::steady_clock::time_point deadline,
                               const std::optional<HubPrefetch>& prefetch) {
  std::optional<Prefetch> asked;
  if (prefetch) {
    asked =
        Prefetch{.method = prefetch->method, .path = prefetch->path, .timeout = prefetch->timeout};
  }
  std::vector<std::future<Listing>> listings;
  for (const auto& hub : config.hubs) {
    listings.push_back(std::async(std::launch::async, [&] {
      return list_hub(hub, tls, deadline, config.session_dir, asked);
    }));
  }
  std::vector<Listing> listed;
  for (auto& listing : listings) {
    listed.push_back(listing.get());
  }
  for (auto& listing : listed) {
    for (auto& agent : listing.agents) {
      if (config.find_agent(agent.name) == nullptr) {
        config.agents.push_back(std::move(agent));
      }
    }
  }
  // Answers only for the agents this hub stands for (not one an [[agents]] entry shadows).
  for (std::size_t i = 0; prefetch && i < config.hubs.size(); ++i) {
    for (auto& answer : listed[i].answers) {
      if (const auto* agent = config.find_agent(answer.agent);
          agent != nullptr && agent->hub == config.hubs[i].name) {
        prefetch->answers->push_back(std::move(answer));
      }
    }
  }
  return config;
}

bool hub_listings_running() {
  return listings_running.load() > 0;
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
