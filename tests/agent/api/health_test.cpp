#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "agent/api/control_api.hpp"
#include "support/test_support.hpp"

using namespace garm_edge;
using namespace garm_edge::testing;

TEST_CASE("health says what is broken when libvirt does not answer", "[api][health]") {
  Host host("api.xml");
  CrashSwitch crash;
  FaultyHypervisor hypervisor(host.hypervisor, crash);
  auto service = host.service(hypervisor, host.store);
  agent::ControlApi api(host.config, *service);
  net::HttpRequest request;
  request.method = "GET";
  request.target = request.path = "/healthz";
  const net::PeerIdentity monitor{.common_name = "monitor", .uri_names = {}};

  const auto healthy = api.handle(request, monitor);
  CHECK(healthy.status == 200);
  CHECK(nlohmann::json::parse(healthy.body) == nlohmann::json{{"status", "ok"}});

  hypervisor.fail_on("health");
  const auto broken = api.handle(request, monitor);
  CHECK(broken.status == 503);
  const auto body = nlohmann::json::parse(broken.body);
  CHECK(body.at("status") == "unavailable");
  CHECK_THAT(body.at("libvirt").get<std::string>(), Catch::StartsWith("unreachable: "));
}
