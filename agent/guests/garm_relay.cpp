#include "agent/guests/garm_relay.hpp"

namespace garm_edge::agent {

std::shared_ptr<const net::TlsConfig> HttpGarmRelay::trust_for(const net::UpstreamUrl& url,
                                                               const std::string& ca_bundle) {
  if (!url.tls) {
    return nullptr;
  }
  try {
    return trust_.trusting(ca_bundle);
  } catch (const net::TlsError& e) {
    throw net::HttpClientError(std::string("the instance's CA bundle is unusable: ") + e.what());
  }
}

net::ClientResponse HttpGarmRelay::forward(const std::string& base_url,
                                           const std::string& ca_bundle, net::ClientRequest request,
                                           std::chrono::milliseconds timeout,
                                           net::HeadHandler on_head) {
  const auto url = net::parse_upstream_url(base_url);
  request.target = url.path + request.target;
  auto options = options_;
  options.request_timeout = timeout;
  options.max_response_bytes = kMaxBodyBytes;
  return net::send_request_with_head(url, request, options, trust_for(url, ca_bundle),
                                     std::move(on_head));
}

std::unique_ptr<net::WebSocketTunnel> HttpGarmRelay::open_websocket(
    const std::string& url_text, const std::string& ca_bundle,
    const std::vector<std::pair<std::string, std::string>>& headers) {
  auto url = net::parse_upstream_url(url_text);
  const std::string target = url.path.empty() ? "/" : "";
  return std::make_unique<net::WebSocketTunnel>(url, target, headers, options_,
                                                trust_for(url, ca_bundle));
}

}  // namespace garm_edge::agent
