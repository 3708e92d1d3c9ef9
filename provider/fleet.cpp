#include "provider/fleet.hpp"

#include <algorithm>
#include <map>

#include <nlohmann/json.hpp>

#include "common/text.hpp"
#include "wire/join_token.hpp"
#include "wire/relay_framing.hpp"

namespace garm_edge::provider {

AgentReply reply_of(const std::function<net::HttpsResponse()>& call) {
  try {
    return {.response = call(), .error = "", .request_sent = true};
  } catch (const net::HttpsError& e) {
    return {.response = std::nullopt, .error = e.what(), .request_sent = e.request_sent()};
  }
}

Fleet::Fleet(const ProviderConfig& config, TlsConfigCache* shared)
    : config_(config), tls_(shared != nullptr ? *shared : own_tls_) {
  for (const auto& endpoint : config.agents) {
    agents_.push_back(std::make_unique<AgentClient>(endpoint, config, tls_));
  }
}

AgentClient* Fleet::find(const std::string& name) {
  for (auto& agent : agents_) {
    if (agent->name() == name) {
      return agent.get();
    }
  }
  return nullptr;
}

std::vector<AgentReply> Fleet::ask_all(
    const std::function<net::HttpsResponse(AgentClient&)>& call) {
  return each_at_once<AgentReply>(
      [&call](AgentClient& agent) { return reply_of([&] { return call(agent); }); });
}

std::vector<AgentReply> Fleet::request_all(const std::string& method, const std::string& path,
                                           CallKind kind) {
  fan_out(method, path, kind);
  return ask_all([&](AgentClient& agent) { return agent.call(method, path, "", kind); });
}

void Fleet::fan_out(const std::string& method, const std::string& path, CallKind kind,
                    std::optional<std::chrono::steady_clock::time_point> deadline) {
  std::map<std::string, std::vector<AgentClient*>> by_hub;
  for (auto& agent : agents_) {
    if (!agent->endpoint().hub.empty() && !agent->has_prefetched(method, path)) {
      // One relay per hub process: agents of one hub entry may be reached at different URLs.
      by_hub[agent->endpoint().hub + " " + agent->endpoint().url].push_back(agent.get());
    }
  }
  std::vector<std::future<void>> pending;
  for (const auto& [hub, members] : by_hub) {
    if (members.size() > 1) {
      pending.push_back(std::async(std::launch::async, [&, &members = members] {
        fan_out_to(members, method, path, kind, deadline);
      }));
    }
  }
  for (auto& done : pending) {
    done.get();
  }
}

void Fleet::fan_out_to(const std::vector<AgentClient*>& members, const std::string& method,
                       const std::string& path, CallKind kind,
                       std::optional<std::chrono::steady_clock::time_point> deadline) {
  const auto& hub = members.front()->endpoint();
  auto options = call_options(config_, kind, deadline, hub_session_name(hub.hub, hub.url));
  options.check_peer = hub_peer();
  nlohmann::json names = nlohmann::json::array();
  for (const auto* member : members) {
    names.push_back(member->name());
  }
  auto timeout = options.request_timeout;
  if (deadline) {
    timeout = std::min(timeout, std::chrono::duration_cast<std::chrono::milliseconds>(
                                    *deadline - std::chrono::steady_clock::now()));
  }
  // The hub answers a little before this process gives up: one hung agent must not cost the
  // answers of all the others (and then the time to ask each of them again).
  timeout -= std::min(timeout / 5, std::chrono::milliseconds(2000));
  const nlohmann::json request = {{"method", method},
                                  {"target", path},
                                  {"agents", names},
                                  {"timeout_ms", std::max<std::int64_t>(1, timeout.count())}};
  std::optional<std::vector<wire::RelayedAnswer>> answers;
  try {
    const auto response = net::HttpsClient(net::parse_https_url(hub.url), tls_.get(hub), options)
                              .request("POST", "/v1/relay", request.dump());
    if (response.status == 200) {
      answers = wire::parse_relay_framing(response.body);
    }
  } catch (const std::exception&) {
  }
  if (!answers) {
    return;  // a hub older than /v1/relay, or down: its agents are asked one by one
  }
  for (auto& answer : *answers) {
    const auto member = std::find_if(members.begin(), members.end(), [&](const auto* candidate) {
      return candidate->name() == answer.agent;
    });
    if (member == members.end()) {
      continue;
    }
    if (answer.status != 0) {
      (*member)->prefetched(method, path,
                            {.status = answer.status, .body = std::move(answer.body)});
    } else {
      (*member)->prefetch_failed(method, path, std::move(answer.body), answer.sent);
    }
  }
}

std::vector<Fleet::CapacityProbe> Fleet::probe_capacity(
    std::chrono::steady_clock::time_point deadline) {
  fan_out("GET", "/v1/capacity", CallKind::probe, deadline);
  const auto replies = ask_all([deadline](AgentClient& agent) {
    return agent.call("GET", "/v1/capacity", "", CallKind::probe, deadline);
  });
  std::vector<CapacityProbe> probes;
  for (std::size_t i = 0; i < replies.size(); ++i) {
    const auto& reply = replies[i];
    CapacityProbe probe;
    if (!reply.response) {
      probe.error = reply.error;
    } else if (reply.response->status != 200) {
      probe.error = agents_[i]->describe(*reply.response);
    } else {
      try {
        probe.capacity = wire::parse_agent_capacity(reply.response->body);
      } catch (const std::exception& e) {
        probe.error = "agent " + agents_[i]->name() +
                      " answered an unusable capacity: " + printable_excerpt(e.what());
      }
    }
    probes.push_back(std::move(probe));
  }
  return probes;
}

}  // namespace garm_edge::provider
