#include "agent/guests/garm_relay.hpp"

namespace garm_edge::agent {

net::ClientResponse HttpGarmRelay::forward(const std::string& base_url,
                                           const std::string& ca_bundle,
                                           net::ClientRequest request) {
  const auto url = net::parse_upstream_url(base_url);
  request.target = url.path + request.target;
  std::shared_ptr<const net::TlsConfig> trust;
  if (url.tls) {
    try {
      trust = trust_.trusting(ca_bundle);
    } catch (const net::TlsError& e) {
      throw net::HttpClientError(std::string("the instance's CA bundle is unusable: ") + e.what());
    }
  }
  return net::send_request(url, request, options_, trust);
}

}  // namespace garm_edge::agent
