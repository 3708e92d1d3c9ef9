#pragma once

#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "net/https_client.hpp"
#include "provider/agent_client.hpp"
#include "provider/provider_config.hpp"
#include "wire/agent_capacity.hpp"

namespace garm_edge::provider {

/// One agent's answer to a fanned-out call, or why there was none.
struct AgentReply {
  std::optional<net::HttpsResponse> response;
  std::string error;         // set when there is no response: the agent's name and what failed
  bool request_sent = true;  // false: nothing reached the agent

  bool answered(int status) const { return response && response->status == status; }
  /// The agent's own "no such instance" (404 with code not_found): not a 404 from an agent
  /// that lacks the endpoint, or from a proxy in front of it.
  bool not_found() const { return answered(404) && error_code_of(*response) == "not_found"; }
};

/// Every agent of the provider's config, each asked in its own thread when a command needs
/// more than one of them.
class Fleet {
 public:
  /// `shared`: the process's TLS configs, when something loaded some already (a hub's list).
  explicit Fleet(const ProviderConfig& config, TlsConfigCache* shared = nullptr);

  std::vector<std::unique_ptr<AgentClient>>& agents() { return agents_; }
  AgentClient* find(const std::string& name);

  /// Runs `call` on every agent at once; the replies in config order. A call that throws
  /// net::HttpsError becomes a reply without a response.
  std::vector<AgentReply> ask_all(const std::function<net::HttpsResponse(AgentClient&)>& call);

  /// `work` on every agent at once, each in its own thread (none for a single agent); the
  /// results in config order. `work` must not throw.
  template <class Result>
  std::vector<Result> each_at_once(const std::function<Result(AgentClient&)>& work) {
    if (agents_.size() == 1) {  // no thread for the common single-host config
      return {work(*agents_.front())};
    }
    std::vector<std::future<Result>> pending;
    pending.reserve(agents_.size());
    for (auto& agent : agents_) {
      pending.push_back(
          std::async(std::launch::async, [&work, client = agent.get()] { return work(*client); }));
    }
    std::vector<Result> results;
    results.reserve(pending.size());
    for (auto& result : pending) {
      results.push_back(result.get());
    }
    return results;
  }

  /// Asks each hub with more than one agent in the fleet, in one request, for every one of its
  /// agents' answers to `method path` (at once for all hubs); each agent's next such call
  /// takes its answer from there. A hub that cannot do it leaves its agents to be asked one by
  /// one, as without this.
  void fan_out(const std::string& method, const std::string& path, CallKind kind,
               std::optional<std::chrono::steady_clock::time_point> deadline = {});

  /// One request to every agent at once, each with the same `kind` of deadline.
  std::vector<AgentReply> request_all(const std::string& method, const std::string& path,
                                      CallKind kind);

  /// Every agent's capacity, asked at once under the probe deadline: nothing (and the reason)
  /// for an agent that did not answer in time or answered something unusable.
  struct CapacityProbe {
    std::optional<wire::AgentCapacity> capacity;
    std::string error;
  };
  std::vector<CapacityProbe> probe_capacity(std::chrono::steady_clock::time_point deadline);

 private:
  void fan_out_to(const std::vector<AgentClient*>& members, const std::string& method,
                  const std::string& path, CallKind kind,
                  std::optional<std::chrono::steady_clock::time_point> deadline);

  const ProviderConfig& config_;
  TlsConfigCache own_tls_;
  TlsConfigCache& tls_;
  std::vector<std::unique_ptr<AgentClient>> agents_;
};

/// The reply of one agent to a call, turning net::HttpsError into an error reply.
AgentReply reply_of(const std::function<net::HttpsResponse()>& call);

}  // namespace garm_edge::provider
