#include "agent/guests/garm_relay.hpp"

#include "net/secret_token.hpp"

namespace garm_edge::agent {

net::ClientResponse HttpGarmRelay::forward(const std::string& base_url,
                                           const std::string& ca_bundle,
                                           net::ClientRequest request) {
  const auto url = net::parse_upstream_url(base_url);
  request.target = url.path + request.target;
  return net::send_request(url, request, options_, url.tls ? trust_for(ca_bundle) : nullptr);
}

std::shared_ptr<const net::TlsConfig> HttpGarmRelay::trust_for(const std::string& ca_bundle) {
  const auto key = net::sha256_hex(ca_bundle);
  std::lock_guard lock(mutex_);
  auto& trust = trust_[key];
  if (!trust) {
    try {
      trust = net::TlsConfig::client_trusting(ca_bundle);
    } catch (const net::TlsError& e) {
      trust_.erase(key);
      throw net::HttpClientError(std::string("the instance's CA bundle is unusable: ") + e.what());
    }
  }
  return trust;
}

}  // namespace garm_edge::agent
