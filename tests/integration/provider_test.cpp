#include <fstream>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "integration/api_server.hpp"
#include "provider/provider_config.hpp"
#include "wire/base64.hpp"
#include "wire/provider_instance.hpp"
#include "wire/schemas.hpp"

using namespace garm_edge;
using namespace garm_edge::testing;

namespace {

const std::string kProvider = GARM_PROVIDER_EDGE_BIN;

/// The provider configured for one ApiServer, run exactly as garm runs it.
class Garm {
 public:
  explicit Garm(ApiServer& server, std::string interface_version = "v0.1.0")
      : interface_version_(std::move(interface_version)) {
    const auto& pki = server.pki();
    std::filesystem::create_directories(dir_.path() / "sessions");
    config_ = dir_.path() / "provider.toml";
    std::ofstream(config_) << "session_dir = \"" << (dir_.path() / "sessions").string() << "\"\n"
                           << "[[agents]]\nname = \"rack1\"\nurl = \"https://localhost:"
                           << server.port() << "\"\n"
                           << "ca = \"" << (pki / "ca.crt").string() << "\"\n"
                           << "certificate = \"" << (pki / "clients/garm.crt").string() << "\"\n"
                           << "key = \"" << (pki / "clients/garm.key").string() << "\"\n";
  }

  ProcessResult run(const std::string& command, std::map<std::string, std::string> extra = {},
                    const std::string& input = "") const {
    extra["GARM_COMMAND"] = command;
    extra["GARM_CONTROLLER_ID"] = kController;
    extra["GARM_PROVIDER_CONFIG_FILE"] = config_.string();
    extra["GARM_INTERFACE_VERSION"] = interface_version_;
    if (interface_version_ == "v0.1.1" && command != "CreateInstance") {
      extra.emplace("GARM_POOL_EXTRASPECS", "bnVsbA==");  // pool info garm adds in v0.1.1
    }
    return run_like_garm(kProvider, extra, input);
  }

  const std::filesystem::path& config() const { return config_; }
  const std::filesystem::path& dir() const { return dir_.path(); }

 private:
  TempDir dir_;
  std::filesystem::path config_;
  std::string interface_version_;
};

std::string bootstrap_json(const std::string& name) {
  return R"({"name":")" + name +
         R"(","tools":[],"repo_url":"https://github.com/org","callback-url":"https://garm/api/v1/callbacks",)"
         R"("metadata-url":"https://garm/api/v1/metadata","instance-token":"secret-jwt","ssh-keys":null,)"
         R"("extra_specs":{"runner_install_template":"IyEvYmluL2Jhc2gK"},"github-runner-group":"","ca-cert-bundle":null,)"
         R"("arch":"amd64","os_type":"linux","flavor":"small","image":"debian-12","labels":null,"pool_id":")" +
         kPool +
         R"(","user_data_options":{"disable_updates_on_boot":false,"extra_packages":null,"enable_boot_debug":false},)"
         R"("jit_config_enabled":true,"proxy_config":{"http_proxy":"","https_proxy":"","no_proxy":""}})";
}

/// stdout must be exactly one JSON document garm can unmarshal.
nlohmann::json strict_json(const ProcessResult& result) {
  INFO("stdout: " << result.out << "\nstderr: " << result.err);
  REQUIRE(result.exit_code == 0);
  return nlohmann::json::parse(result.out);  // throws on any trailing text
}

}  // namespace

TEST_CASE("garm-provider-edge drives a whole lifecycle as garm runs it", "[provider]") {
  const std::string version = GENERATE("v0.1.0", "v0.1.1");
  INFO("interface " << version);
  ApiServer server;
  const Garm garm(server, version);
  const std::map<std::string, std::string> pool{{"GARM_POOL_ID", kPool}};
  std::map<std::string, std::string> create_env = pool;
  if (version == "v0.1.1") {
    create_env["GARM_POOL_EXTRASPECS"] =
        wire::base64_encode(R"({"runner_install_template":"IyEvYmluL2Jhc2gK"})");
  }

  const auto created = wire::provider_instance_from_json(
      strict_json(garm.run("CreateInstance", create_env, bootstrap_json("garm-prov01"))));
  CHECK(created.status == wire::InstanceStatus::running);
  CHECK(created.name == "garm-prov01");
  CHECK_THAT(created.provider_id, Catch::StartsWith("rack1:"));

  auto with = [&](std::map<std::string, std::string> env, const std::string& instance) {
    env["GARM_INSTANCE_ID"] = instance;
    if (version == "v0.1.1") {
      env.emplace("GARM_POOL_ID", kPool);
    }
    return env;
  };
  const auto listed = strict_json(garm.run("ListInstances", pool));
  REQUIRE(listed.size() == 1);
  CHECK(listed[0]["provider_id"] == created.provider_id);
  CHECK(strict_json(garm.run("GetInstance", with({}, created.provider_id)))["name"] ==
        "garm-prov01");
  CHECK(strict_json(garm.run("GetInstance", with({}, "garm-prov01")))["provider_id"] ==
        created.provider_id);

  const auto stopped = garm.run("StopInstance", with({}, created.provider_id));
  CHECK(stopped.exit_code == 0);
  CHECK(stopped.out.empty());
  CHECK(strict_json(garm.run("GetInstance", with({}, created.provider_id)))["status"] == "stopped");
  CHECK(garm.run("StartInstance", with({}, created.provider_id)).exit_code == 0);
  CHECK(strict_json(garm.run("GetInstance", with({}, created.provider_id)))["status"] == "running");

  const auto deleted = garm.run("DeleteInstance", with({}, created.provider_id));
  CHECK(deleted.exit_code == 0);
  CHECK(deleted.err.empty());
  CHECK(garm.run("DeleteInstance", with({}, "garm-prov01")).exit_code ==
        0);  // already gone: success
  const auto missing = garm.run("GetInstance", with({}, created.provider_id));
  CHECK(missing.exit_code == 30);
  CHECK(missing.out.empty());
  CHECK(garm.run("ListInstances", pool).out == "[]");
}

TEST_CASE("a scale-set delete with an empty GARM_POOL_ID works (v0.1.1)", "[provider]") {
  ApiServer server;
  const Garm garm(server, "v0.1.1");
  strict_json(garm.run("CreateInstance", {{"GARM_POOL_ID", kPool}}, bootstrap_json("garm-scale1")));
  const auto deleted =
      garm.run("DeleteInstance", {{"GARM_INSTANCE_ID", "garm-scale1"}, {"GARM_POOL_ID", ""}});
  CHECK(deleted.exit_code == 0);
  CHECK(garm.run("ListInstances", {{"GARM_POOL_ID", kPool}}).out == "[]");
}

TEST_CASE("RemoveAllInstances removes every instance of the controller", "[provider]") {
  ApiServer server;
  const Garm garm(server);
  strict_json(garm.run("CreateInstance", {{"GARM_POOL_ID", kPool}}, bootstrap_json("garm-all1")));
  strict_json(garm.run("CreateInstance", {{"GARM_POOL_ID", kPool}}, bootstrap_json("garm-all2")));
  CHECK(garm.run("RemoveAllInstances").exit_code == 0);
  CHECK(garm.run("ListInstances", {{"GARM_POOL_ID", kPool}}).out == "[]");
}

TEST_CASE("commands that need no agent answer from the binary alone", "[provider]") {
  const auto version = run_like_garm(kProvider, {{"GARM_COMMAND", "GetVersion"}});
  CHECK(version.exit_code == 0);
  CHECK_THAT(version.out, Catch::Matches(R"(\d+\.\d+\.\d+)"));  // plain text, no newline
  const auto versions =
      run_like_garm(kProvider, {{"GARM_COMMAND", "GetSupportedInterfaceVersions"}});
  CHECK(nlohmann::json::parse(versions.out) == nlohmann::json::array({"v0.1.0", "v0.1.1"}));
  CHECK(run_like_garm(kProvider, {{"GARM_COMMAND", "GetConfigJSONSchema"}}).out ==
        provider::provider_config_json_schema());
  CHECK(run_like_garm(kProvider, {{"GARM_COMMAND", "GetExtraSpecsJSONSchema"}}).out ==
        wire::extra_specs_json_schema());
  const auto validate = [](const std::string& specs) {
    return run_like_garm(kProvider, {{"GARM_COMMAND", "ValidatePoolInfo"},
                                     {"GARM_INTERFACE_VERSION", "v0.1.1"},
                                     {"GARM_POOL_EXTRASPECS", wire::base64_encode(specs)}});
  };
  CHECK(validate(R"({"enable_boot_debug":true,"extra_packages":["git"]})").exit_code == 0);
  CHECK(validate("null").exit_code == 0);
  const auto unknown = validate(R"({"typo_key":1})");
  CHECK(unknown.exit_code != 0);
  CHECK_THAT(unknown.err, Catch::Contains("typo_key"));
}

TEST_CASE("failures exit non-zero with a message on stderr and nothing on stdout", "[provider]") {
  ApiServer server;
  const Garm garm(server);
  const auto unknown = garm.run("Explode");
  CHECK(unknown.exit_code != 0);
  CHECK(unknown.out.empty());
  CHECK_THAT(unknown.err, Catch::Contains("unknown command \"Explode\""));

  const auto version = run_like_garm(
      kProvider, {{"GARM_COMMAND", "ListInstances"}, {"GARM_INTERFACE_VERSION", "v9"}});
  CHECK(version.exit_code != 0);

  const auto bad_stdin = garm.run("CreateInstance", {{"GARM_POOL_ID", kPool}}, "{not json");
  CHECK(bad_stdin.exit_code != 0);
  CHECK(bad_stdin.out.empty());

  // An agent that cannot be reached is an error, never an empty list.
  TempDir dir;
  const auto unreachable = dir.path() / "provider.toml";
  const auto& pki = server.pki();  // real certificates: the failure must be the connection
  std::ofstream(unreachable) << "[[agents]]\nname = \"gone\"\nurl = \"https://localhost:1\"\n"
                             << "ca = \"" << (pki / "ca.crt").string() << "\"\n"
                             << "certificate = \"" << (pki / "clients/garm.crt").string() << "\"\n"
                             << "key = \"" << (pki / "clients/garm.key").string() << "\"\n";
  const auto list = run_like_garm(kProvider, {{"GARM_COMMAND", "ListInstances"},
                                              {"GARM_POOL_ID", kPool},
                                              {"GARM_CONTROLLER_ID", kController},
                                              {"GARM_PROVIDER_CONFIG_FILE", unreachable.string()}});
  CHECK(list.exit_code != 0);
  CHECK(list.out.empty());
  CHECK_THAT(list.err, Catch::Contains("cannot connect to localhost:1"));
}

TEST_CASE("the TLS session is kept 0600 in the configured directory and reused", "[provider]") {
  ApiServer server;
  const Garm garm(server);
  CHECK(garm.run("GetInstance", {{"GARM_INSTANCE_ID", "garm-none"}}).exit_code == 30);
  const auto session = garm.dir() / "sessions" / "rack1.tls-session";
  REQUIRE(std::filesystem::exists(session));
  CHECK((std::filesystem::status(session).permissions() & std::filesystem::perms::all) ==
        (std::filesystem::perms::owner_read | std::filesystem::perms::owner_write));
  CHECK(garm.run("GetInstance", {{"GARM_INSTANCE_ID", "garm-none"}}).exit_code ==
        30);  // with the saved session
}

TEST_CASE("a provider ID naming an agent the config does not know is an error, not 'gone'",
          "[provider]") {
  ApiServer server;
  const Garm garm(server);
  const auto deleted =
      garm.run("DeleteInstance",
               {{"GARM_INSTANCE_ID", "retired-host:0b6f5b8e-3a52-4c8e-9c1f-2a3b4c5d6e7f"}});
  CHECK(deleted.exit_code == 1);  // 30 would make garm forget a VM that may still run
  CHECK_THAT(deleted.err, Catch::Contains("names no configured agent"));
}
