// The control API's routes called directly, without TLS: each request becomes its typed command,
// is authorized, and answers with the status and body garm-provider-edge relies on.
#include "agent/api/control_api.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "agent/instances/warm_spec.hpp"
#include "support/test_support.hpp"
#include "wire/bootstrap.hpp"
#include "wire/json_fields.hpp"
#include "wire/placement_view.hpp"

using namespace garm_edge;
using namespace garm_edge::testing;
using nlohmann::json;

namespace {

const net::PeerIdentity kGarm{.common_name = "garm", .uri_names = {}};
const net::PeerIdentity kStranger{.common_name = "stranger", .uri_names = {}};
const net::PeerIdentity kPrometheus{.common_name = "prometheus",
                                    .uri_names = {"urn:garm-edge:metrics:prometheus"}};

struct Api {
  /// `adjust` changes the config after the API section is set up.
  explicit Api(const std::function<void(agent::AgentConfig&)>& adjust = {})
      : host("api.xml",
             [&adjust](agent::AgentConfig& config) {
               config.api.enabled = true;
               config.api.clients = {{.identity = "garm", .controllers = {kController}}};
               if (adjust) {
                 adjust(config);
               }
             }),
        service(host.service()),
        api(host.config, *service) {
    if (host.config.guests.enabled) {
      guests = std::make_unique<ServedGuests>(host.config, host.hypervisor, host.log);
      guests->serve(*service);
    }
  }

  std::string metrics() { return call("GET", "/metrics", "", kPrometheus).body; }

  net::HttpResponse call(const std::string& method, const std::string& target,
                         const std::string& body = "", const net::PeerIdentity& peer = kGarm) {
    net::HttpRequest request;
    request.method = method;
    request.target = target;
    const auto query = target.find('?');
    request.path = target.substr(0, query);
    request.query = query == std::string::npos ? "" : target.substr(query + 1);
    request.body = body;
    return api.handle(request, peer);
  }

  Host host;
  std::unique_ptr<ServedGuests> guests;  // with [guests] only; outlives the service it serves
  std::unique_ptr<agent::InstanceService> service;
  agent::ControlApi api;
};

std::string instances(const std::string& rest = "") {
  return "/v1/controllers/" + kController + "/instances" + rest;
}

/// [[warm]]: one debian-12/small guest for kController.
agent::WarmConfig one_warm_guest_of_garm() {
  return {.controller = kController,
          .image = "debian-12",
          .flavor = "small",
          .count = 1,
          .ready_timeout = std::chrono::seconds(600),
          .name = "debian-12/small for " + kController};
}

std::string code_of(const net::HttpResponse& response) {
  return json::parse(response.body).value("code", "");
}

}  // namespace

TEST_CASE("control API: the instance lifecycle route by route", "[api]") {
  Api api;
  const auto body = wire::to_json(bootstrap_for("garm-route01")).dump();

  const auto dry = api.call("POST", instances("?dry_run=true"), body);
  CHECK(dry.status == 200);
  CHECK(json::parse(dry.body).at("already_exists") == false);
  CHECK(api.call("GET", instances("/garm-route01")).status == 404);  // a dry run makes nothing
  // Placement's warm-only try: this agent has no warm guest, so it refuses and makes nothing.
  const auto warm_only = api.call("POST", instances("?warm_only=true"), body);
  CHECK(warm_only.status == 503);
  CHECK(json::parse(warm_only.body).at("code") == "no_capacity");
  CHECK(api.call("GET", instances("/garm-route01")).status == 404);

  const auto created = api.call("POST", instances(), body);
  REQUIRE(created.status == 200);
  const auto provider_id = json::parse(created.body).at("provider_id").get<std::string>();
  CHECK(json::parse(created.body).at("status") == "running");

  CHECK(json::parse(api.call("GET", instances("/garm-route01")).body).at("provider_id") ==
        provider_id);
  CHECK(json::parse(api.call("GET", instances("/" + provider_id)).body).at("name") ==
        "garm-route01");
  const auto listed =
      api.call("GET", "/v1/controllers/" + kController + "/pools/" + kPool + "/instances");
  CHECK(json::parse(listed.body).size() == 1);

  CHECK(api.call("POST", instances("/garm-route01/stop?force=true")).status == 200);
  CHECK(json::parse(api.call("GET", instances("/garm-route01")).body).at("status") == "stopped");
  CHECK(api.call("POST", instances("/garm-route01/start")).status == 200);

  const auto events =
      api.call("GET", "/v1/controllers/" + kController + "/events?instance=garm-route01");
  CHECK(json::parse(events.body).front().at("event") == "creating");

  CHECK(json::parse(api.call("DELETE", instances("/garm-route01")).body).at("deleted") == true);
  CHECK(json::parse(api.call("DELETE", instances("/garm-route01")).body).at("deleted") == false);
  CHECK(json::parse(api.call("DELETE", instances()).body).at("removed") == 0);
}

TEST_CASE("control API: what every refusal looks like", "[api]") {
  Api api;
  SECTION("no such endpoint, or no such method on it: 404") {
    CHECK(api.call("GET", "/v2/images").status == 404);
    CHECK(api.call("PUT", instances()).status == 404);
    CHECK(api.call("GET", instances("/a/b/c")).status == 404);
    CHECK(code_of(api.call("GET", "/nope")) == "no_such_endpoint");
  }
  SECTION("an unknown client is refused anything under /v1, whether it exists or not") {
    CHECK(api.call("GET", "/v1/images", "", kStranger).status == 403);
    CHECK(api.call("GET", "/v1/nothing-here", "", kStranger).status == 403);
    CHECK(api.call("GET", "/healthz", "", kStranger).status == 200);  // monitoring needs no grant
  }
  SECTION("another controller is refused before its request is read") {
    const auto other = "/v1/controllers/" + kOtherController + "/instances/not..valid";
    const auto refused = api.call("GET", other);
    CHECK(refused.status == 403);
    CHECK(code_of(refused) == "forbidden");
    // Whether or not the endpoint exists, as the agent always answered.
    CHECK(api.call("PUT", "/v1/controllers/" + kOtherController + "/instances").status == 403);
    CHECK(api.call("GET", "/v1/controllers/not-a-uuid/nothing").status == 400);
  }
  SECTION("the agent's own warm-guest controller is no client's, not even one allowed every one") {
    api.host.config.api.clients.push_back({.identity = "admin", .controllers = {"*"}});
    const net::PeerIdentity admin{.common_name = "admin", .uri_names = {}};
    const auto warm = "/v1/controllers/" + std::string(agent::kWarmControllerId) + "/pools/" +
                      kPool + "/instances";
    const auto refused = api.call("GET", warm, "", admin);
    CHECK(refused.status == 403);
    CHECK_THAT(refused.body, Catch::Contains("warm guests"));
    CHECK(api.call("GET", "/v1/controllers/" + kOtherController + "/pools/" + kPool + "/instances",
                   "", admin)
              .status == 200);  // any other controller it may
  }
  SECTION("values are parsed at the edge: 400 naming the field, nothing done") {
    CHECK_THAT(api.call("GET", "/v1/controllers/not-a-uuid/instances/x").body,
               Catch::Contains("controller ID in the path"));
    CHECK_THAT(api.call("GET", instances("/..x")).body, Catch::Contains("instance"));
    CHECK(
        api.call("GET", "/v1/controllers/" + kController + "/pools/not-a-pool/instances").status ==
        400);
    CHECK(api.call("POST", instances(), "{").status == 400);
    CHECK(api.call("POST", instances("/x/stop?force=%ff")).status == 400);
    CHECK(api.call("GET", instances("/a%ffb")).status == 400);
    CHECK(api.host.tagged_domain_count() == 0);
  }
  SECTION("a missing instance is 404 for get and guest, and for start and stop") {
    CHECK(api.call("GET", instances("/garm-none")).status == 404);
    CHECK(api.call("GET", instances("/garm-none/guest")).status == 404);
    CHECK(api.call("POST", instances("/garm-none/start")).status == 404);
    CHECK(code_of(api.call("POST", instances("/garm-none/stop"))) == "not_found");
  }
}

TEST_CASE("control API: host, pool and schema routes", "[api]") {
  Api api;
  CHECK(json::parse(api.call("GET", "/v1/images").body).front().at("name") == "debian-12");
  CHECK(json::parse(api.call("GET", "/v1/flavors").body).front().contains("vcpus"));
  const auto capacity = json::parse(api.call("GET", "/v1/capacity").body);
  CHECK(capacity.at("cpus").get<int>() > 0);
  CHECK(capacity.at("agent_id") == kAgentId);
  CHECK(api.call("GET", "/v1/schemas/config").body == agent::agent_config_json_schema());
  const auto validate = "/v1/controllers/" + kController + "/pools/validate";
  CHECK(api.call("POST", validate, R"({"image":"debian-12","flavor":"small"})").status == 200);
  CHECK_THAT(api.call("POST", validate, R"({"image":"debian-12","flavor":"huge"})").body,
             Catch::Contains("unknown flavor"));
  CHECK(api.call("POST", validate, R"({"image":"../x","flavor":"small"})").status == 400);
  CHECK(api.call("GET", instances("/..x")).status == 400);
  // A key the extra-specs schema does not publish: refused at validation and at the create.
  CHECK(api.call("POST", validate,
                 R"({"image":"debian-12","flavor":"small","extra_specs":{"typo_key":1}})")
            .status == 400);
  auto typo = wire::to_json(bootstrap_for("garm-typo01"));
  typo["extra_specs"] = {{"typo_key", 1}};
  const auto refused = api.call("POST", instances(), typo.dump());
  CHECK(refused.status == 400);
  CHECK_THAT(refused.body, Catch::Contains("extra_specs.typo_key"));
  // Every answered route is counted under its command's name.
  CHECK_THAT(api.metrics(),
             Catch::Contains("route=\"capacity\",method=\"GET\",code=\"200\"") &&
                 Catch::Contains("route=\"validate_pool\",method=\"POST\",code=\"400\"") &&
                 Catch::Contains("route=\"get\",method=\"GET\",code=\"400\""));
}

TEST_CASE("control API: the capacity answer and the draining switch", "[api]") {
  Api api;
  api.host.config.api.clients.push_back({.identity = "operator", .controllers = {"*"}});
  const net::PeerIdentity kOperator{.common_name = "operator", .uri_names = {}};
  CHECK(api.call("POST", instances(), wire::to_json(bootstrap_for("garm-cap01")).dump()).status ==
        200);
  auto capacity = json::parse(api.call("GET", "/v1/capacity").body);
  CHECK(capacity.at("machine") == "x86_64");
  CHECK(capacity.at("used").at("instances") == 1);
  CHECK(capacity.at("free").at("vcpus").get<int>() ==
        capacity.at("limit").at("vcpus").get<int>() - 2);
  CHECK(capacity.at("instances_by_state").at("running") == 1);
  CHECK(capacity.at("draining") == false);
  // What may run out, for alerts: the same figures in /metrics, and the create's start.
  const auto metrics = api.metrics();
  CHECK_THAT(metrics,
             Catch::Contains("garm_edge_libvirt_up 1\n") &&
                 Catch::Contains("garm_edge_capacity_vcpus{kind=\"free\"} " +
                                 capacity.at("free").at("vcpus").dump() + "\n") &&
                 Catch::Contains("garm_edge_capacity_instances{kind=\"used\"} 1\n") &&
                 Catch::Contains("garm_edge_draining 0\n") &&
                 Catch::Contains("garm_edge_capacity_flavor_instances{flavor=\"small\"} ") &&
                 Catch::Contains("garm_edge_startups_in_progress 1\n") &&
                 Catch::Contains("garm_edge_startup_phase_seconds_count{start=\"cold\"") &&
                 Catch::Contains("phase=\"started\"} 1\n"));

  // Draining acts on every controller's creates: garm's own client may not switch it.
  const auto refused = api.call("POST", "/v1/draining");
  CHECK(refused.status == 403);
  CHECK_THAT(refused.body, Catch::Contains("controllers = [\\\"*\\\"]"));
  CHECK(api.call("POST", "/v1/draining", "", kOperator).status == 200);
  CHECK(json::parse(api.call("GET", "/v1/capacity").body).at("draining") == true);
  const auto create =
      api.call("POST", instances(), wire::to_json(bootstrap_for("garm-cap02")).dump());
  CHECK(create.status == 503);
  CHECK(code_of(create) == "draining");
  CHECK(api.call("DELETE", instances("/garm-cap01")).status == 200);
  // A refused create is no start: nothing left in progress to time out later.
  CHECK_THAT(api.metrics(), Catch::Contains("garm_edge_startups_in_progress 0\n") &&
                                Catch::Contains("reason=\"deleted_first\"} 1\n") &&
                                !Catch::Contains("reason=\"bootstrap_timeout\""));
  CHECK(api.call("DELETE", "/v1/draining", "", kOperator).status == 200);
  CHECK(api.call("POST", instances(), wire::to_json(bootstrap_for("garm-cap02")).dump()).status ==
        200);
  CHECK_THAT(api.metrics(), Catch::Contains("route=\"draining\",method=\"POST\",code=\"403\""));
}

TEST_CASE(
    "control API: free guest addresses bound the room in the capacity answer, and a create "
    "that finds none is no_capacity",
    "[api][guests]") {
  Api api([](agent::AgentConfig& config) {
    enable_guest_addresses(config, "192.168.150.10-192.168.150.11");
  });
  const auto capacity = [&api] { return json::parse(api.call("GET", "/v1/capacity").body); };
  const auto create = [&api](const std::string& name) {
    return api.call("POST", instances(), wire::to_json(bootstrap_for(name)).dump());
  };
  auto answer = capacity();
  CHECK(answer.at("addresses") == json{{"total", 2}, {"held", 0}, {"resting", 0}, {"free", 2}});
  CHECK(answer.at("limit").at("instances") == 2);  // max_instances is 0: the range is the limit
  CHECK(answer.at("free").at("instances") == 2);

  REQUIRE(create("garm-addr01").status == 200);
  REQUIRE(create("garm-addr02").status == 200);
  answer = capacity();
  CHECK(answer.at("addresses") == json{{"total", 2}, {"held", 2}, {"resting", 0}, {"free", 0}});
  CHECK(answer.at("free").at("instances") == 0);
  CHECK(answer.at("free").at("memory_mib").get<std::uint64_t>() > 2048);  // memory is not it

  // A deleted guest's address rests: the range has a free slot in instances, not in addresses.
  REQUIRE(api.call("DELETE", instances("/garm-addr01")).status == 200);
  answer = capacity();
  CHECK(answer.at("addresses") == json{{"total", 2}, {"held", 1}, {"resting", 1}, {"free", 0}});
  CHECK(answer.at("used").at("instances") == 1);
  CHECK(answer.at("free").at("instances") == 0);

  // Refused as a full host is, so garm-provider-edge tries the next agent.
  const auto refused = create("garm-addr03");
  CHECK(refused.status == 503);
  CHECK(code_of(refused) == "no_capacity");
  CHECK_THAT(json::parse(refused.body).at("message").get<std::string>(),
             Catch::Contains("no free guest address in 192.168.150.10-192.168.150.11") &&
                 Catch::Contains("1 held, 1 resting"));
  CHECK(api.call("GET", instances("/garm-addr03")).status == 404);
  CHECK(api.host.holds_nothing_of(kController, "garm-addr03"));
}

TEST_CASE("control API: an agent without [guests] reports no guest addresses", "[api][guests]") {
  Api api;
  const auto answer = json::parse(api.call("GET", "/v1/capacity").body);
  CHECK(answer.at("addresses").is_null());
  CHECK(answer.at("limit").at("instances") == 0);  // none
}

TEST_CASE("control API: a host without an instance limit is not full in /metrics",
          "[api][metrics]") {
  Api api;  // max_instances = 0, no guest address range: vCPUs and memory are the bound
  REQUIRE(
      api.call("POST", instances(), wire::to_json(bootstrap_for("garm-room01")).dump()).status ==
      200);
  const auto metrics = api.metrics();
  // No figure, rather than a limit and a free count of 0 that GarmEdgeHostFull reads as full.
  CHECK_THAT(metrics, Catch::Contains("garm_edge_capacity_instances{kind=\"used\"} 1\n") &&
                          !Catch::Contains("garm_edge_capacity_instances{kind=\"free\"}") &&
                          !Catch::Contains("garm_edge_capacity_instances{kind=\"limit\"}"));
  const auto capacity = json::parse(api.call("GET", "/v1/capacity").body);
  const auto small_room = capacity.at("free").at("vcpus").get<std::uint64_t>() / 2;  // 2 vCPUs
  REQUIRE(small_room > 0);
  CHECK_THAT(metrics, Catch::Contains("garm_edge_capacity_flavor_instances{flavor=\"small\"} "));
  CHECK_THAT(metrics,
             !Catch::Contains("garm_edge_capacity_flavor_instances{flavor=\"small\"} 0\n"));

  // With a limit, the figures are there and count down to 0.
  api.host.config.capacity.max_instances = 1;
  const auto full = api.metrics();
  CHECK_THAT(full,
             Catch::Contains("garm_edge_capacity_instances{kind=\"limit\"} 1\n") &&
                 Catch::Contains("garm_edge_capacity_instances{kind=\"free\"} 0\n") &&
                 Catch::Contains("garm_edge_capacity_flavor_instances{flavor=\"small\"} 0\n"));
}

TEST_CASE("control API: /metrics is for clients of every controller and metrics readers",
          "[api][metrics]") {
  Api api;
  api.host.config.api.clients.push_back({.identity = "operator", .controllers = {"*"}});
  api.host.config.api.clients.push_back(
      {.identity = "urn:garm-edge:through-hub", .controllers = {"*"}});
  REQUIRE(
      api.call("POST", instances(), wire::to_json(bootstrap_for("garm-seen01")).dump()).status ==
      200);
  const auto read = [&](const net::PeerIdentity& peer) {
    return api.call("GET", "/metrics", "", peer);
  };
  // garm's client acts for one controller: the metrics name others' pools and caches.
  const auto refused = read(kGarm);
  CHECK(refused.status == 403);
  for (const auto* spelling : {"/metrics/", "//metrics", "/%6Detrics"}) {
    INFO(spelling);
    CHECK(api.call("GET", spelling, "", kGarm).status == 403);
    CHECK(api.call("GET", spelling, "", kStranger).status == 403);
  }
  CHECK_THAT(refused.body, Catch::Contains("controllers = [\\\"*\\\"] or a metrics certificate"));
  CHECK_THAT(refused.body, !Catch::Contains(kController));
  CHECK(read({.common_name = "operator", .uri_names = {}}).status == 200);
  CHECK(read(kPrometheus).status == 200);
  const auto through_hub = [&](const std::string& controllers) {
    return read({.common_name = "tenant",
                 .uri_names = {"urn:garm-edge:through-hub",
                               "urn:garm-edge:through-hub:controllers:" + controllers}});
  };
  CHECK(through_hub(kController).status == 403);
  CHECK(through_hub("*").status == 200);
}

TEST_CASE("control API: placement hears only of the asking controller's warm guests",
          "[api][warm]") {
  Api api;
  api.host.config.api.clients.push_back({.identity = "other", .controllers = {kOtherController}});
  api.host.config.warm = {one_warm_guest_of_garm()};
  const net::PeerIdentity kOther{.common_name = "other", .uri_names = {}};
  const auto warm_offers = [&](const std::string& controller, const net::PeerIdentity& peer) {
    const auto answer =
        api.call("GET", "/v1/controllers/" + controller + "/placement/garm-warm01", "", peer);
    REQUIRE(answer.status == 200);
    return json::parse(answer.body).at("capacity").at("warm");
  };
  const auto own = warm_offers(kController, kGarm);
  REQUIRE(own.size() == 1);
  CHECK(own.at(0).at("controller") == kController);
  // Another controller's create could never take these guests: its placement is not sent to
  // this agent's warm guests first.
  CHECK(warm_offers(kOtherController, kOther).empty());
  const auto capacity = json::parse(api.call("GET", "/v1/capacity").body);
  REQUIRE(capacity.at("warm").size() == 1);
  CHECK(capacity.at("warm").at(0).at("controller") == kController);
  // A client of another controller sees neither garm's warm guests nor its controller's ID,
  // in the capacity answer or the warm list.
  const auto seen_by_other = api.call("GET", "/v1/capacity", "", kOther);
  CHECK(json::parse(seen_by_other.body).at("warm").empty());
  CHECK_THAT(seen_by_other.body, !Catch::Contains(kController));
  CHECK_THAT(api.call("GET", "/v1/warm", "", kOther).body, !Catch::Contains(kController));
  // Through a hub the agent trusts with every controller, the hub says which the caller has.
  api.host.config.api.clients.push_back(
      {.identity = "urn:garm-edge:through-hub", .controllers = {"*"}});
  const auto through_hub = [&](const std::string& controllers) {
    const net::PeerIdentity caller{
        .common_name = "tenant",
        .uri_names = {"urn:garm-edge:through-hub",
                      "urn:garm-edge:through-hub:controllers:" + controllers}};
    return json::parse(api.call("GET", "/v1/capacity", "", caller).body).at("warm");
  };
  CHECK(through_hub(kOtherController).empty());
  CHECK(through_hub(kOtherController + "," + kController).size() == 1);
  CHECK(through_hub("*").size() == 1);
}

TEST_CASE("control API: the operator pulls an image ahead of demand, and sees its pull",
          "[api][images]") {
  Api api;
  api.host.config.api.clients.push_back({.identity = "operator", .controllers = {"*"}});
  const net::PeerIdentity kOperator{.common_name = "operator", .uri_names = {}};
  FakeImageBases images;
  images.error = "HTTP 503 from images.example:443";
  api.service->use_image_bases(images);

  // The disk and the link are the whole host's: garm's own client may not.
  const auto refused = api.call("POST", "/v1/images/debian-12/pull");
  CHECK(refused.status == 403);
  CHECK_THAT(refused.body, Catch::Contains("may not pull images"));
  CHECK(images.pulls_asked == 0);
  const auto started = api.call("POST", "/v1/images/debian-12/pull", "", kOperator);
  CHECK(started.status == 202);
  CHECK(json::parse(started.body).at("pull") == "started");
  CHECK(json::parse(api.call("POST", "/v1/images/debian-12/pull", "", kOperator).body).at("pull") ==
        "under way already");
  CHECK(api.call("POST", "/v1/images/ubuntu-arm/pull", "", kOperator).status == 400);
  CHECK(api.call("POST", "/v1/images/..%2Fx/pull", "", kOperator).status == 400);

  // The capacity answer says where each pull stands; placement reads it.
  const auto offered = json::parse(api.call("GET", "/v1/capacity").body).at("images");
  CHECK(offered.at(0).at("name") == "debian-12");
  CHECK(offered.at(0).at("state") == "ready");  // its local base serves meanwhile
  CHECK(offered.at(0).at("error") == "HTTP 503 from images.example:443");
  CHECK(offered.at(1).at("state") == "ready");  // not pulled: always ready
}

TEST_CASE("control API: a cache's controller refreshes it and sees it, no other client does",
          "[api][caches]") {
  Api api([](agent::AgentConfig& config) {
    config.api.clients.push_back({.identity = "other", .controllers = {kOtherController}});
    agent::CacheConfig docker;
    docker.name = "docker";
    docker.controller = kController;
    config.caches = {docker};
  });
  const net::PeerIdentity kOtherClient{.common_name = "other", .uri_names = {}};
  FakeCacheGenerations caches;
  api.service->use_cache_generations(caches);

  const auto started = api.call("POST", "/v1/caches/docker/refresh");
  CHECK(started.status == 202);
  CHECK(json::parse(started.body).at("refresh") == "started");
  CHECK(json::parse(api.call("POST", "/v1/caches/docker/refresh").body).at("refresh") ==
        "under way already");
  // Another controller's client gets the answer an unknown cache gets, and starts nothing.
  const auto foreign = api.call("POST", "/v1/caches/docker/refresh", "", kOtherClient);
  const auto unknown = api.call("POST", "/v1/caches/nope/refresh", "", kOtherClient);
  CHECK(foreign.status == 400);
  CHECK(json::parse(foreign.body).at("message") ==
        "this agent has no cache \"docker\" for this client");
  CHECK(unknown.status == 400);
  CHECK(api.call("POST", "/v1/caches/Bad..Name/refresh").status == 400);
  CHECK(caches.refreshes_asked == 2);

  const auto shown = json::parse(api.call("GET", "/v1/capacity").body).at("caches");
  REQUIRE(shown.size() == 2);
  CHECK(shown.at(0).at("name") == "docker");
  CHECK(shown.at(0).at("generation") == 3);
  CHECK(shown.at(0).at("refreshing") == true);
  CHECK(shown.at(1).at("error") == "");
  CHECK(json::parse(api.call("GET", "/v1/capacity", "", kOtherClient).body).at("caches").empty());

  // Validating a pool checks its caches as each create of it would: the same refusals.
  const auto validate = [&](const std::string& controller, const std::string& asked,
                            const net::PeerIdentity& peer) {
    return api.call(
        "POST", "/v1/controllers/" + controller + "/pools/validate",
        R"({"image":"debian-12","flavor":"small","extra_specs":{"caches":)" + asked + "}}", peer);
  };
  CHECK(validate(kController, R"(["docker"])", kGarm).status == 200);
  for (const auto* asked : {R"("x")", R"(["nope"])", R"(["BAD NAME!"])"}) {
    INFO(asked);
    const auto refused = validate(kController, asked, kGarm);
    CHECK(refused.status == 400);
    CHECK_THAT(refused.body, Catch::Contains("extra_specs.caches"));
  }
  const auto foreign_pool = validate(kOtherController, R"(["docker"])", kOtherClient);
  CHECK(foreign_pool.status == 400);
  CHECK_THAT(foreign_pool.body, Catch::Contains(R"(no cache \"docker\" for this controller)"));
  const auto create = wire::to_json(bootstrap_for("garm-cache-x"));
  auto with_foreign_cache = create;
  with_foreign_cache["extra_specs"] = {{"caches", "x"}};
  CHECK(api.call("POST", instances(), with_foreign_cache.dump()).status == 400);
}

TEST_CASE("control API: a hub's placement view is each controller's own probe, for every name",
          "[api][hub][placement]") {
  Api api;
  api.host.config.api.clients.push_back({.identity = "other", .controllers = {kOtherController}});
  api.host.config.api.clients.push_back(
      {.identity = "urn:garm-edge:through-hub", .controllers = {"*"}});
  api.host.config.warm = {one_warm_guest_of_garm()};
  REQUIRE(
      api.call("POST", instances(), wire::to_json(bootstrap_for("garm-view01")).dump()).status ==
      200);
  const auto as_hub = [](const std::string& controllers) {
    return net::PeerIdentity{.common_name = "garm-edge-hub",
                             .uri_names = {"urn:garm-edge:through-hub",
                                           "urn:garm-edge:through-hub:controllers:" + controllers}};
  };
  // It names every controller's instances and warm guests: a client of one controller, or a
  // hub that vouches for one only, may not read it.
  CHECK(api.call("GET", "/v1/placement-view").status == 403);
  CHECK(api.call("GET", "/v1/placement-view", "", as_hub(kController)).status == 403);
  const auto answer = api.call("GET", "/v1/placement-view", "", as_hub("*"));
  REQUIRE(answer.status == 200);
  const auto view = wire::parse_placement_view(answer.body);
  CHECK(view.instances == std::vector<std::string>{wire::instance_key(kController, "garm-view01")});
  // What the hub answers for a name the agent does not hold is what the agent's probe says.
  const auto probe = [&](const std::string& controller, const net::PeerIdentity& peer) {
    const auto probed =
        api.call("GET", "/v1/controllers/" + controller + "/placement/garm-view02", "", peer);
    REQUIRE(probed.status == 200);
    return json::parse(probed.body).at("capacity");
  };
  const net::PeerIdentity kOther{.common_name = "other", .uri_names = {}};
  CHECK(json::parse(wire::to_json(view.shown_to(kController)).dump()) == probe(kController, kGarm));
  CHECK(json::parse(wire::to_json(view.shown_to(kOtherController)).dump()) ==
        probe(kOtherController, kOther));
  CHECK(view.shown_to(kController).warm.size() == 1);
  CHECK(view.shown_to(kOtherController).warm.empty());
}

TEST_CASE("control API: a controller's client sees its own share and never another's use",
          "[api][shares]") {
  Api api;
  api.host.config.api.clients.push_back({.identity = "other", .controllers = {kOtherController}});
  api.host.config.api.clients.push_back({.identity = "operator", .controllers = {"*"}});
  api.host.config.shares.quotas.push_back(
      {.controller = kController, .max = {.instances = 5}, .reserved = {.instances = 1}});
  const net::PeerIdentity kOther{.common_name = "other", .uri_names = {}};
  const net::PeerIdentity kOperator{.common_name = "operator", .uri_names = {}};
  REQUIRE(api.call("POST", "/v1/controllers/" + kController + "/instances",
                   wire::to_go_json_text(wire::to_json(bootstrap_for("garm-share01"))))
              .status == 200);
  const auto shares_seen_by = [&](const net::PeerIdentity& peer) {
    const auto answer = api.call("GET", "/v1/capacity", "", peer);
    REQUIRE(answer.status == 200);
    return answer.body;
  };
  // garm's own client: its share, with its use, quota and reservation.
  const auto own = json::parse(shares_seen_by(kGarm)).at("shares");
  REQUIRE(own.size() == 1);
  CHECK(own.at(0).at("controller") == kController);
  CHECK(own.at(0).at("used").at("instances") == 1);
  CHECK(own.at(0).at("quota").at("instances") == 5);
  CHECK(own.at(0).at("room").at("normal").at("instances") == 4);
  // The other controller's client: neither garm's controller nor what it holds or may hold.
  const auto other = shares_seen_by(kOther);
  CHECK_THAT(other, !Catch::Contains(kController));
  CHECK(json::parse(other).at("shares").empty());
  // ...though the room garm's reservation keeps from it shows in its own placement's share.
  const auto placement = json::parse(
      api.call("GET", "/v1/controllers/" + kOtherController + "/placement/garm-x", "", kOther)
          .body);
  CHECK_THAT(placement.dump(), !Catch::Contains(kController));
  CHECK(placement.at("capacity").at("share").at("used").at("instances") == 0);
  // The operator sees every share.
  CHECK(json::parse(shares_seen_by(kOperator)).at("shares").size() == 1);
  // And /metrics (for clients of every controller) has use, limits and refusals.
  const auto metrics = api.call("GET", "/metrics", "", kOperator).body;
  CHECK_THAT(metrics, Catch::Contains("garm_edge_controller_use{controller=\"" + kController +
                                      "\",resource=\"instances\"} 1"));
  CHECK_THAT(metrics, Catch::Contains("garm_edge_controller_limit{controller=\"" + kController +
                                      "\",kind=\"quota\",resource=\"instances\"} 5"));
  CHECK_THAT(metrics, Catch::Contains("garm_edge_create_refusals_total{reason=\"quota\"} 0"));
}

TEST_CASE(
    "control API: a reservation holds where the guest address range is the only bound, "
    "and a controller's ID in another case is the same controller",
    "[api][guests][shares]") {
  Api api([](agent::AgentConfig& config) {
    enable_guest_addresses(config, "192.168.150.10-192.168.150.13");  // 4 guests, no max_instances
    config.api.clients.push_back({.identity = "hub-vouched", .controllers = {"*"}});
    config.shares.quotas.push_back(
        {.controller = kOtherController, .max = {}, .reserved = {.instances = 2}});
    config.shares.quotas.push_back(
        {.controller = kController, .max = {.instances = 3}, .reserved = {}});
  });
  const net::PeerIdentity kEvery{.common_name = "hub-vouched", .uri_names = {}};
  const auto create = [&](const std::string& controller, const std::string& name,
                          const net::PeerIdentity& peer) {
    return api.call("POST", "/v1/controllers/" + controller + "/instances",
                    wire::to_json(bootstrap_for(name)).dump(), peer);
  };
  REQUIRE(create(kController, "garm-res01", kGarm).status == 200);
  // The same controller in capitals (as a client trusted for every controller might send it)
  // counts against the same quota and reservation.
  auto upper = kController;
  std::transform(upper.begin(), upper.end(), upper.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  REQUIRE(create(upper, "garm-res02", kEvery).status == 200);
  // Two addresses left, both kept for the other controller: placement says so, and so does
  // the create.
  const auto placement =
      json::parse(api.call("GET", "/v1/controllers/" + kController + "/placement/garm-res03").body);
  CHECK(placement.at("capacity").at("share").at("room").at("normal").at("instances") == 0);
  CHECK(placement.at("capacity").at("share").at("used").at("instances") == 2);
  const auto refused = create(kController, "garm-res03", kGarm);
  CHECK(refused.status == 503);
  CHECK_THAT(refused.body, Catch::Contains("other controllers' reservations") &&
                               Catch::Contains("2 instances reserved and unused"));
  CHECK(api.host.holds_nothing_of(kController, "garm-res03"));
  CHECK(create(upper, "garm-res03", kEvery).status == 503);
  REQUIRE(create(kOtherController, "garm-res04", kEvery).status == 200);
  REQUIRE(create(kOtherController, "garm-res05", kEvery).status == 200);
  // Every address is taken now: the refusal says so.
  const auto full = create(kOtherController, "garm-res06", kEvery);
  CHECK(full.status == 503);
  CHECK_THAT(full.body, Catch::Contains("no free guest address"));
}
