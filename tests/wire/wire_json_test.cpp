#include <catch2/catch.hpp>

#include "wire/bootstrap.hpp"
#include "wire/error.hpp"
#include "wire/json_fields.hpp"
#include "wire/provider_instance.hpp"

using namespace garm_edge::wire;

namespace {

// garm-contract.md §2.1, as garm's json.Marshal writes it (compact, declaration order).
constexpr const char* kGarmBootstrap =
    R"({"name":"garm-2xkq8mfj3d0a","tools":[{"os":"linux","architecture":"x64","download_url":"https://github.com/actions/runner/releases/download/v2.330.0/actions-runner-linux-x64-2.330.0.tar.gz","filename":"actions-runner-linux-x64-2.330.0.tar.gz","sha256_checksum":"0a1b2c"}],"repo_url":"https://github.com/myorg","callback-url":"https://garm.example.com/api/v1/callbacks","metadata-url":"https://garm.example.com/api/v1/metadata","instance-token":"eyJhbGciOiJIUzI1NiIs","ssh-keys":null,"extra_specs":{"my_key":"v","runner_install_template":"IyEvYmluL2Jhc2gKCnNldCAtZXgK"},"github-runner-group":"","ca-cert-bundle":null,"arch":"amd64","os_type":"linux","flavor":"default","image":"ubuntu:24.04","labels":null,"pool_id":"9dcf590a-1192-4a9c-b3e4-e0902974c2c0","user_data_options":{"disable_updates_on_boot":false,"extra_packages":null,"enable_boot_debug":false},"jit_config_enabled":true,"proxy_config":{"http_proxy":"","https_proxy":"","no_proxy":""}})";

constexpr const char* kGarmInstance =
    R"({"provider_id":"i-0abc123","name":"garm-2xkq8mfj3d0a","os_type":"linux","os_name":"ubuntu","os_version":"24.04","os_arch":"amd64","addresses":[{"address":"10.0.0.12","type":"private"}],"status":"running"})";

constexpr const char* kGarmErrorInstance =
    R"({"provider_id":"i-0abc123","name":"garm-2xkq8mfj3d0a","status":"error","provider_fault":"cXVvdGEgZXhjZWVkZWQ="})";

std::string field_of_error(const std::string& json) {
  try {
    parse_bootstrap_instance(json);
  } catch (const WireError& e) {
    return e.field();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("garm's BootstrapInstance sample round-trips byte for byte", "[wire]") {
  const auto bootstrap = parse_bootstrap_instance(kGarmBootstrap);
  CHECK(bootstrap.name == "garm-2xkq8mfj3d0a");
  CHECK(bootstrap.callback_url == "https://garm.example.com/api/v1/callbacks");
  CHECK(bootstrap.metadata_url == "https://garm.example.com/api/v1/metadata");
  CHECK(bootstrap.instance_token == "eyJhbGciOiJIUzI1NiIs");
  CHECK_FALSE(bootstrap.ssh_keys.has_value());
  CHECK_FALSE(bootstrap.ca_cert_bundle.has_value());
  CHECK(bootstrap.arch == OsArch::amd64);
  CHECK(bootstrap.os_type == OsType::linux);
  CHECK(bootstrap.image == "ubuntu:24.04");
  REQUIRE(bootstrap.tools.has_value());
  CHECK(bootstrap.tools->at(0).sha256_checksum == "0a1b2c");
  CHECK_FALSE(bootstrap.tools->at(0).temp_download_token.has_value());
  CHECK(bootstrap.extra_specs->at("runner_install_template") == "IyEvYmluL2Jhc2gKCnNldCAtZXgK");
  CHECK(bootstrap.jit_config_enabled);
  CHECK(to_go_json_text(to_json(bootstrap)) == kGarmBootstrap);
}

TEST_CASE("JSON text escapes <, > and & the way Go does", "[wire]") {
  auto bootstrap = parse_bootstrap_instance(kGarmBootstrap);
  bootstrap.labels = std::vector<std::string>{"a<b>&c", "line\u2028sep"};
  const auto text = to_go_json_text(to_json(bootstrap));
  CHECK_THAT(text, Catch::Contains(R"("labels":["a\u003cb\u003e\u0026c","line\u2028sep"])"));
  CHECK(parse_bootstrap_instance(text) == bootstrap);
}

TEST_CASE("BootstrapInstance carries Go's null, omitempty and []byte rules", "[wire]") {
  auto bootstrap = parse_bootstrap_instance(kGarmBootstrap);
  SECTION("extra_specs is omitted when garm sent none") {
    bootstrap.extra_specs.reset();
    CHECK_FALSE(to_json(bootstrap).contains("extra_specs"));
  }
  SECTION("ca-cert-bundle is base64 on the wire and raw PEM in memory") {
    bootstrap.ca_cert_bundle = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
    const auto wire = to_json(bootstrap);
    CHECK(wire["ca-cert-bundle"] ==
          "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUIKLS0tLS1FTkQgQ0VSVElGSUNBVEUtLS0tLQo=");
    CHECK(parse_bootstrap_instance(wire.dump()) == bootstrap);
  }
  SECTION("labels and ssh-keys are null when absent and arrays when present") {
    bootstrap.labels = std::vector<std::string>{"linux", "runner-pool-id=abc"};
    const auto wire = to_json(bootstrap);
    CHECK(wire["labels"].is_array());
    CHECK(wire["ssh-keys"].is_null());
    CHECK(parse_bootstrap_instance(wire.dump()) == bootstrap);
  }
}

TEST_CASE("BootstrapInstance tolerates unknown keys and missing optional ones", "[wire]") {
  const auto bootstrap = parse_bootstrap_instance(
      R"({"name":"garm-a","pool_id":"9dcf590a-1192-4a9c-b3e4-e0902974c2c0","image":"i","flavor":"f","future_field":{"x":[1,2]}})");
  CHECK(bootstrap.name == "garm-a");
  CHECK_FALSE(bootstrap.tools.has_value());
  CHECK(bootstrap.proxy_config == ProxyConfig{});
}

TEST_CASE("BootstrapInstance errors name the field that is wrong", "[wire]") {
  CHECK(field_of_error(R"({"pool_id":"p","image":"i","flavor":"f"})") == "name");
  CHECK(field_of_error(R"({"name":"n","image":"i","flavor":"f"})") == "pool_id");
  CHECK(field_of_error(R"({"name":"n","pool_id":"p","flavor":"f"})") == "image");
  CHECK(field_of_error(R"({"name":7,"pool_id":"p","image":"i","flavor":"f"})") == "name");
  CHECK(
      field_of_error(
          R"({"name":"n","pool_id":"p","image":"i","flavor":"f","tools":[{"os":"linux"},{"download_url":5}]})") ==
      "tools[1].download_url");
  CHECK(field_of_error(
            R"({"name":"n","pool_id":"p","image":"i","flavor":"f","labels":["a",null]})") ==
        "labels[1]");
  CHECK(
      field_of_error(
          R"({"name":"n","pool_id":"p","image":"i","flavor":"f","ca-cert-bundle":"not base64!"})") ==
      "ca-cert-bundle");
  CHECK(field_of_error(R"({"name":"n","pool_id":"p","image":"i","flavor":"f","arch":"sparc"})") ==
        "arch");
  CHECK(
      field_of_error(
          R"({"name":"n","pool_id":"p","image":"i","flavor":"f","user_data_options":{"enable_boot_debug":"yes"}})") ==
      "user_data_options.enable_boot_debug");
  CHECK(
      field_of_error(R"({"name":"n","pool_id":"p","image":"i","flavor":"f","extra_specs":[1]})") ==
      "extra_specs");
  CHECK(field_of_error(R"([1,2])") == "(document)");
  CHECK(field_of_error(R"({"name":"n",)") == "bootstrap instance");
  CHECK(field_of_error(R"({"name":"n","pool_id":"p","image":"i","flavor":"f","x":6e661})") ==
        "bootstrap instance");
}

TEST_CASE("garm's ProviderInstance samples round-trip byte for byte", "[wire]") {
  const auto instance = parse_provider_instance(kGarmInstance);
  CHECK(instance.status == InstanceStatus::running);
  CHECK(instance.addresses == std::vector<Address>{{"10.0.0.12", AddressType::private_address}});
  CHECK(to_go_json_text(to_json(instance)) == kGarmInstance);

  const auto failed = parse_provider_instance(kGarmErrorInstance);
  CHECK(failed.provider_fault == "quota exceeded");
  CHECK(to_go_json_text(to_json(failed)) == kGarmErrorInstance);
}

TEST_CASE("ProviderInstance omits empty fields and lists print [] when empty", "[wire]") {
  ProviderInstance instance;
  instance.provider_id = "p";
  instance.name = "n";
  instance.status = InstanceStatus::stopped;
  CHECK(to_json(instance).dump() == R"({"provider_id":"p","name":"n","status":"stopped"})");
  CHECK(to_json(std::vector<ProviderInstance>{}).dump() == "[]");
  CHECK(parse_provider_instance_list("null").empty());
  CHECK(parse_provider_instance_list(R"([{"provider_id":"p","name":"n","status":"stopped"}])") ==
        std::vector<ProviderInstance>{instance});
}

TEST_CASE("Enumerations use garm's exact strings", "[wire]") {
  CHECK(to_string(InstanceStatus::pending_force_delete) == "pending_force_delete");
  CHECK(parse_enum<RunnerStatus>("installing") == RunnerStatus::installing);
  CHECK(to_string(AddressType::public_address) == "public");
  CHECK_FALSE(parse_enum<OsArch>("x86_64").has_value());
  CHECK(is_reportable_by_provider(InstanceStatus::unknown));
  CHECK_FALSE(is_reportable_by_provider(InstanceStatus::creating));
  CHECK_FALSE(is_reportable_by_provider(InstanceStatus::pending_create));
}

TEST_CASE("JSON deeper than garm ever sends is refused before it is parsed", "[wire]") {
  const auto nested = [](std::size_t depth) {
    return std::string(depth, '[') + std::string(depth, ']');
  };
  CHECK(json_depth_within(nested(kMaxJsonDepth)));
  CHECK_FALSE(json_depth_within(nested(kMaxJsonDepth + 1)));
  CHECK(json_depth_within(
      R"({"a":"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[","b":"\"{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{"})"));
  CHECK_FALSE(json_depth_within(R"({"a":"\\")" + nested(40) + "}"));  // the string ended
  CHECK_NOTHROW(parse_json_text(nested(kMaxJsonDepth), "x"));
  CHECK_THROWS_WITH(parse_json_text(nested(500'000), "bootstrap instance"),
                    "bootstrap instance: invalid JSON: nested deeper than 32 levels");
  auto bootstrap = nlohmann::json::parse(kGarmBootstrap);
  nlohmann::json deep = 1;
  for (int i = 0; i < 40; ++i) {
    deep = nlohmann::json::array({deep});
  }
  bootstrap["extra_specs"]["deep"] = deep;
  CHECK_THROWS_AS(parse_bootstrap_instance(bootstrap.dump()), WireError);
}
