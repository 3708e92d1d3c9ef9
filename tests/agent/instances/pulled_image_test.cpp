// Creates of an image the agent pulls: none while no base is ready (a clear no_capacity),
// then on the pulled base; a base that a guest backs onto is in use until it is deleted.
#include <catch2/catch.hpp>

#include "agent/instances/identifiers.hpp"
#include "agent/instances/image_bases.hpp"
#include "support/service_error_matcher.hpp"
#include "support/test_support.hpp"

using namespace garm_edge;
using namespace garm_edge::testing;

namespace {

void pull_only(agent::AgentConfig& config) {
  auto& image = config.images.front();
  image.base_volume.clear();
  image.base_path.clear();
  image.source = agent::ImageSourceConfig{.url = "https://images.example/debian-12.qcow2",
                                          .sha256 = std::string(64, 'a'),
                                          .checksums_url = ""};
}

}  // namespace

TEST_CASE("a create waits for no pull: no base yet is no capacity, saying why", "[images]") {
  Host host("pulled-image.xml", pull_only);
  FakeImageBases images;
  auto service = host.service();
  service->use_image_bases(images);
  CHECK_THROWS_MATCHES(service->create(kControllerId, bootstrap_for("garm-pull01")),
                       agent::ServiceError, has_code(agent::ServiceError::Code::no_capacity));
  CHECK_THROWS_WITH(service->create(kControllerId, bootstrap_for("garm-pull01")),
                    Catch::Contains("image \"debian-12\" is not pulled yet"));
  images.error = "HTTP 404 from images.example:443";
  CHECK_THROWS_WITH(service->create(kControllerId, bootstrap_for("garm-pull01")),
                    Catch::Contains("the last pull failed: HTTP 404"));
  CHECK(host.holds_nothing_of(kController, "garm-pull01"));
}

TEST_CASE("a create backs onto the pulled base, which stays in use until the guest is gone",
          "[images]") {
  Host host("pulled-image.xml", pull_only);
  FakeImageBases images;
  images.base = agent::ImageBase{.path = "/edge-pool/debian-12.qcow2", .format = "qcow2"};
  auto service = host.service();
  service->use_image_bases(images);
  service->create(kControllerId, bootstrap_for("garm-pull02"));
  const auto record = host.store.get(agent::domain_name_for(kController, "garm-pull02"));
  REQUIRE(record);
  CHECK(record->base_path == "/edge-pool/debian-12.qcow2");
  CHECK(service->base_in_use("/edge-pool/debian-12.qcow2"));
  CHECK_FALSE(service->base_in_use("/edge-pool/an-older-base.qcow2"));
  service->remove(kControllerId, instance_ref("garm-pull02"));
  CHECK_FALSE(service->base_in_use("/edge-pool/debian-12.qcow2"));
}
