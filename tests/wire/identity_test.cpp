#include "wire/identity.hpp"

#include <catch2/catch.hpp>

using namespace garm_edge;
using Uris = std::vector<std::string>;

TEST_CASE("a certificate acts only in the role it claims", "[roles]") {
  const Uris host = {"urn:garm-edge:agent:r1"};
  const Uris client = {"urn:garm-edge:client:garm"};
  const Uris hub = {"urn:garm-edge:hub:garm-edge-hub"};
  const Uris none = {};
  const Uris both = {"urn:garm-edge:agent:r1", "urn:garm-edge:client:garm"};

  // As a client: a host's or the hub's never, whatever its CN.
  CHECK_FALSE(wire::refusal_as_client(client));
  CHECK_FALSE(wire::refusal_as_client(none));  // made by `pki init` before roles
  CHECK_FALSE(wire::refusal_as_client({"urn:garm-edge:through-hub", "https://example"}));
  CHECK_THAT(*wire::refusal_as_client(host), Catch::Contains("host \"r1\", which is no client"));
  CHECK(wire::refusal_as_client(hub));
  CHECK(wire::refusal_as_client(both));

  // As the hub: its role, or a pre-role hub certificate by the CN only the hub has.
  CHECK_FALSE(wire::refusal_as_hub(hub, "anything"));
  CHECK_FALSE(wire::refusal_as_hub(none, "garm-edge-hub"));
  CHECK(wire::refusal_as_hub(none, "garm"));
  CHECK_THAT(*wire::refusal_as_hub(host, "garm-edge-hub"), Catch::Contains("not the hub's"));
  CHECK(wire::refusal_as_hub(client, "garm-edge-hub"));
  CHECK(wire::refusal_as_hub({"urn:garm-edge:hub:a", "urn:garm-edge:hub:b"}, "garm-edge-hub"));

  // As a host: its own name only; no claim only when not required.
  CHECK_FALSE(wire::refusal_as_host(host, "x", "r1", true));
  CHECK_THAT(*wire::refusal_as_host(host, "x", "r2", false), Catch::Contains("not of host \"r2\""));
  CHECK(wire::refusal_as_host(client, "x", "r1", false));
  CHECK(wire::refusal_as_host(hub, "x", "r1", false));
  CHECK_FALSE(wire::refusal_as_host(none, "x", "r1", false));
  CHECK_THAT(*wire::refusal_as_host(none, "x", "r1", true), Catch::Contains("names no host"));
  CHECK(wire::refusal_as_host(both, "x", "r1", false));
  CHECK_THAT(*wire::refusal_as_host(none, "garm-edge-hub", "r1", false),
             Catch::Contains("the hub's certificate"));
  // A prefix is no name: "r1" does not match a claim of "r10".
  CHECK(wire::refusal_as_host({"urn:garm-edge:agent:r10"}, "x", "r1", false));
}
