#include "provider/fleet.hpp"

#include "common/text.hpp"

namespace garm_edge::provider {

AgentReply reply_of(const std::function<net::HttpsResponse()>& call) {
  try {
    return {.response = call(), .error = "", .request_sent = true};
  } catch (const net::HttpsError& e) {
    return {.response = std::nullopt, .error = e.what(), .request_sent = e.request_sent()};
  }
}

Fleet::Fleet(const ProviderConfig& config) {
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
  return ask_all([&](AgentClient& agent) { return agent.call(method, path, "", kind); });
}

std::vector<Fleet::CapacityProbe> Fleet::probe_capacity(
    std::chrono::steady_clock::time_point deadline) {
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
