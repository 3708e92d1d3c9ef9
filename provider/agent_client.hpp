#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "net/https_client.hpp"
#include "net/tls_config.hpp"
#include "provider/provider_config.hpp"

namespace garm_edge::provider {

/// How long a call may take: a probe shares the fleet-wide probe deadline, a create has the
/// create timeout, anything else the request timeout.
enum class CallKind { probe, request, create };

/// One agent as this process talks to it; calls may run in several threads at once.
class AgentClient {
 public:
  AgentClient(const AgentEndpoint& endpoint, const ProviderConfig& config)
      : endpoint_(endpoint), config_(config) {}

  const std::string& name() const { return endpoint_.name; }
  const AgentEndpoint& endpoint() const { return endpoint_; }

  /// Throws net::HttpsError (whose message names the agent) when no answer came in time.
  net::HttpsResponse call(const std::string& method, const std::string& path,
                          const std::string& body, CallKind kind,
                          std::optional<std::chrono::steady_clock::time_point> deadline = {});

  /// The agent's error message for a non-200 answer: "agent NAME: message (code, HTTP n)".
  std::string describe(const net::HttpsResponse& response) const;

 private:
  /// Loaded on first use, once (a lookup and a capacity probe may start together).
  std::shared_ptr<const net::TlsConfig> tls();

  const AgentEndpoint& endpoint_;
  const ProviderConfig& config_;
  std::mutex tls_mutex_;
  std::shared_ptr<const net::TlsConfig> tls_;
};

/// The `code` of an agent's JSON error answer ("no_capacity", "not_found", ...); empty when
/// the body is not one.
std::string error_code_of(const net::HttpsResponse& response);

/// A path segment percent-encoded as RFC 3986 2.1 asks.
std::string percent_encode(const std::string& segment);

}  // namespace garm_edge::provider
