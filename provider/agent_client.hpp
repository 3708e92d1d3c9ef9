#pragma once

#include <atomic>
#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>

#include "net/https_client.hpp"
#include "net/tls_config.hpp"
#include "provider/provider_config.hpp"

namespace garm_edge::provider {

/// How long a call may take: a probe shares the fleet-wide probe deadline, a create has the
/// create timeout, anything else the request timeout.
enum class CallKind { probe, request, create };

/// Where the TLS session for `url` of hub `hub` is kept: each hub process has sessions of its own.
std::string hub_session_name(const std::string& hub, const std::string& url);

/// The options of a call of `kind` to the endpoint whose TLS sessions are kept as
/// `<session_dir>/<session_name>.tls-session` (the agent's name, or hub_session_name() for
/// every call through one hub process: one server, one session).

net::HttpsClientOptions call_options(const ProviderConfig& config, CallKind kind,
                                     std::optional<std::chrono::steady_clock::time_point> deadline,
                                     const std::string& session_name);

/// The client TLS configs of one provider process, loaded once per distinct CA, certificate
/// and key: agents that share them (the usual fleet) share one, and no thread loads twice.
class TlsConfigCache {
 public:
  /// Throws what net::TlsConfig::load throws.
  std::shared_ptr<const net::TlsConfig> get(const AgentEndpoint& endpoint);

 private:
  std::mutex mutex_;
  std::map<std::tuple<std::filesystem::path, std::filesystem::path, std::filesystem::path,
                      std::filesystem::path>,
           std::shared_ptr<const net::TlsConfig>>
      configs_;
};

/// The check every call to a hub makes of its certificate: the hub's role (another host or a
/// client of the same CA posing as the hub is refused before anything is sent).
net::PeerCheck hub_peer();
/// What the certificate of `endpoint` must be: the hub's for an agent behind a hub; for one
/// reached directly, never a client's or the hub's, a host's only under the entry's name, and
/// one without a host name only when the entry does not require it.
net::PeerCheck expected_peer(const AgentEndpoint& endpoint);

/// One agent as this process talks to it; calls may run in several threads at once.
class AgentClient {
 public:
  AgentClient(const AgentEndpoint& endpoint, const ProviderConfig& config, TlsConfigCache& tls)
      : endpoint_(endpoint), config_(config), tls_(tls) {}

  const std::string& name() const { return endpoint_.name; }
  const AgentEndpoint& endpoint() const { return endpoint_; }

  /// Throws net::HttpsError (whose message names the agent) when no answer came in time.
  net::HttpsResponse call(const std::string& method, const std::string& path,
                          const std::string& body, CallKind kind,
                          std::optional<std::chrono::steady_clock::time_point> deadline = {});

  /// Whether any call of this process got an HTTP answer from the agent: deferred deletes are
  /// carried out only on agents known to be reachable, at no cost to a dead one.
  bool reached() const { return reached_.load(); }

  /// The agent's error message for a non-200 answer: "agent NAME: message (code, HTTP n)".
  std::string describe(const net::HttpsResponse& response) const;

  /// The answer (or failure) to `method path` that a hub already fetched for this agent along
  /// with its other agents' (Fleet::fan_out): the next such call takes it instead of asking.
  void prefetched(const std::string& method, const std::string& path, net::HttpsResponse response);
  void prefetch_failed(const std::string& method, const std::string& path, std::string error,
                       bool request_sent);
  bool has_prefetched(const std::string& method, const std::string& path);

 private:
  /// A hub's own failure to carry the call (not the agent's answer) as the HttpsError a direct
  /// call would have raised; returns for anything else.
  void throw_hub_failure(const net::HttpsResponse& response) const;
  /// One attempt at `url` (the endpoint's, or another process of its hub).
  net::HttpsResponse call_at(const std::string& url, const std::string& method,
                             const std::string& path, const std::string& body, CallKind kind,
                             std::optional<std::chrono::steady_clock::time_point> deadline) const;

  const AgentEndpoint& endpoint_;
  const ProviderConfig& config_;
  TlsConfigCache& tls_;
  std::atomic<bool> reached_{false};
  struct Prefetched {
    std::string method;
    std::string path;
    std::optional<net::HttpsResponse> response;
    std::string error;
    bool request_sent = true;
  };
  std::mutex prefetched_mutex_;
  std::optional<Prefetched> prefetched_;
};

/// The `code` of an agent's JSON error answer ("no_capacity", "not_found", ...); empty when
/// the body is not one.
std::string error_code_of(const net::HttpsResponse& response);

/// A path segment percent-encoded as RFC 3986 2.1 asks.
std::string percent_encode(const std::string& segment);

}  // namespace garm_edge::provider
