#pragma once

#include <string>

#include "net/http_client.hpp"
#include "net/tls_config.hpp"

namespace garm_edge::agent {

/// The boundary to garm's instance-facing HTTP endpoints (callbacks and metadata).
class GarmRelay {
 public:
  virtual ~GarmRelay() = default;
  /// Sends `request` to `base_url` (garm's callback or metadata URL; `request.target` is the
  /// path below it). HTTPS certificates are checked against `ca_bundle` (PEM, may be empty)
  /// and the system's CAs. Throws net::HttpClientError.
  virtual net::ClientResponse forward(const std::string& base_url, const std::string& ca_bundle,
                                      net::ClientRequest request) = 0;
};

class HttpGarmRelay final : public GarmRelay {
 public:
  explicit HttpGarmRelay(net::HttpClientOptions options) : options_(options) {}

  net::ClientResponse forward(const std::string& base_url, const std::string& ca_bundle,
                              net::ClientRequest request) override;

 private:
  net::HttpClientOptions options_;
  net::ClientTrustCache trust_;
};

}  // namespace garm_edge::agent
