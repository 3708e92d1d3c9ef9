#include <condition_variable>
#include <csignal>
#include <fstream>
#include <future>
#include <mutex>
#include <thread>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "common/durable_file.hpp"
#include "net/pki.hpp"
#include "provider/provider_config.hpp"
#include "support/api_server.hpp"
#include "wire/base64.hpp"
#include "wire/provider_instance.hpp"
#include "wire/schemas.hpp"

using namespace garm_edge;
using namespace garm_edge::testing;

namespace {

/// The provider configured for one ApiServer, run exactly as garm runs it.
/// The one saved TLS session in `dir` (named after the agent and the client certificate).
std::filesystem::path only_session_in(const std::filesystem::path& dir) {
  std::vector<std::filesystem::path> found;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() == ".tls-session") {
      found.push_back(entry.path());
    }
  }
  REQUIRE(found.size() == 1);
  return found.front();
}

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
  CHECK(missing.err == "garm-provider-edge: no instance " + created.provider_id + "\n");
  const auto stop_missing = garm.run("StopInstance", with({}, created.provider_id));
  CHECK(stop_missing.exit_code == 30);
  CHECK(stop_missing.err == "garm-provider-edge: no instance " + created.provider_id + "\n");
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
  // What every create of the pool would refuse, refused when garm validates the pool.
  CHECK(validate(R"({"caches":["docker"]})").exit_code == 0);
  for (const auto* caches :
       {R"("x")", R"(["a","b","c","d","e","f","g","h","i"])", R"(["BAD NAME!"])"}) {
    INFO(caches);
    const auto refused = validate(std::string(R"({"caches":)") + caches + "}");
    CHECK(refused.exit_code != 0);
    CHECK_THAT(refused.err, Catch::Contains("extra_specs.caches"));
  }
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

TEST_CASE("a session saved under garm's certificate never speaks for another one", "[provider]") {
  // The operator's `images pull` from garm's host, with garm's session directory: resuming
  // garm's session would make the agent see garm (403: not allowed to pull images).
  ApiServer server("api.xml", [](agent::AgentConfig& config) {
    config.images.resize(1);
    config.api.clients = {{.identity = "garm", .controllers = {kController}},
                          {.identity = "stranger", .controllers = {"*"}}};
  });
  const Garm garm(server);
  REQUIRE(garm.run("GetInstance", {{"GARM_INSTANCE_ID", "garm-none"}}).exit_code == 30);
  const auto operator_config = garm.dir() / "operator.toml";
  auto text = read_file(garm.dir() / "provider.toml").value_or("");
  for (const std::string part : {".crt", ".key"}) {
    const auto at = text.find("clients/garm" + part);
    REQUIRE(at != std::string::npos);
    text.replace(at, std::string("clients/garm").size(), "clients/stranger");
  }
  std::ofstream(operator_config) << text;
  for (int call = 0; call < 2; ++call) {  // the second with the operator's own saved session
    const auto pulled = run_program(
        kProvider, {"images", "pull", "debian-12", "--config", operator_config.string()});
    INFO(pulled.out << pulled.err);
    CHECK_THAT(pulled.out, Catch::Contains("skipped: image \"debian-12\" has no source"));
  }
  CHECK(garm.run("GetInstance", {{"GARM_INSTANCE_ID", "garm-none"}}).exit_code == 30);
}

TEST_CASE("the TLS session is kept 0600 in the configured directory and reused", "[provider]") {
  ApiServer server;
  const Garm garm(server);
  CHECK(garm.run("GetInstance", {{"GARM_INSTANCE_ID", "garm-none"}}).exit_code == 30);
  const auto session = only_session_in(garm.dir() / "sessions");
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

namespace {

/// Holds the agent's create at its `step`-th hypervisor operation (counted on the thread that
/// runs the create) until release(); every other operation passes.
class CreateHold {
 public:
  explicit CreateHold(FaultyHypervisor& hypervisor) {
    hypervisor.before = [this](const std::string& operation) { on_operation(operation); };
  }

  void arm(int step) {
    std::lock_guard lock(mutex_);
    step_ = step;
    seen_ = 0;
    create_thread_ = {};
    held_ = false;
    released_ = false;
    operations_.clear();
  }
  /// Whether the create reached its step within `timeout` (false: it has fewer steps).
  bool wait_held(std::chrono::milliseconds timeout) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, timeout, [this] { return held_; });
  }
  void release() {
    std::lock_guard lock(mutex_);
    released_ = true;
    changed_.notify_all();
  }
  std::string held_at() {
    std::lock_guard lock(mutex_);
    return operations_.empty() ? "" : operations_.back();
  }

 private:
  void on_operation(const std::string& operation) {
    std::unique_lock lock(mutex_);
    if (step_ < 0) {
      return;
    }
    if (create_thread_ == std::thread::id{}) {
      create_thread_ = std::this_thread::get_id();  // the create's first call comes first
    }
    if (std::this_thread::get_id() != create_thread_ || seen_++ != step_) {
      return;
    }
    operations_.push_back(operation);
    held_ = true;
    changed_.notify_all();
    changed_.wait_for(lock, std::chrono::seconds(20), [this] { return released_; });
  }

  std::mutex mutex_;
  std::condition_variable changed_;
  int step_ = -1;
  int seen_ = 0;
  std::thread::id create_thread_;
  bool held_ = false;
  bool released_ = false;
  std::vector<std::string> operations_;
};

}  // namespace

TEST_CASE("garm cutting a create off at any step, then deleting by name, leaves nothing",
          "[provider]") {
  // garm PR 817: CreateInstance is killed at the pool's bootstrap timeout (SIGKILL from
  // exec.CommandContext), the instance marked error, and DeleteInstance(name) runs at once.
  ApiServer server;
  const Garm garm(server);
  CreateHold hold(server.hypervisor());
  const std::map<std::string, std::string> pool{{"GARM_POOL_ID", kPool}};
  TempDir dir("cut");
  const auto pid_file = (dir.path() / "provider.pid").string();
  int steps = 0;
  for (int step = 0; step < 40; ++step) {
    const auto name = "garm-cut" + std::to_string(step);
    INFO("create held at step " << step);
    hold.arm(step);
    auto create = std::async(std::launch::async, [&] {
      // The shell becomes the provider (exec), so the pid it writes is the provider's.
      std::map<std::string, std::string> env{{"GARM_COMMAND", "CreateInstance"},
                                             {"GARM_CONTROLLER_ID", kController},
                                             {"GARM_POOL_ID", kPool},
                                             {"GARM_PROVIDER_CONFIG_FILE", garm.config().string()},
                                             {"GARM_INTERFACE_VERSION", "v0.1.0"}};
      return run_program("/bin/sh", {"-c", "echo $$ > \"$0\"; exec \"$1\"", pid_file, kProvider},
                         env, bootstrap_json(name));
    });
    // The provider is SIGKILLed once the agent holds its create, however slowly it started
    // (under qemu-user it takes seconds); a create with fewer steps completes instead.
    bool held = false;
    for (int tick = 0; tick < 300 && !held; ++tick) {
      held = hold.wait_held(std::chrono::milliseconds(100));
      if (!held && create.wait_for(std::chrono::seconds(0)) == std::future_status::ready) {
        break;
      }
    }
    if (held) {
      std::ifstream pid(pid_file);
      pid_t provider = 0;
      pid >> provider;
      REQUIRE(provider > 0);
      ::kill(provider, SIGKILL);
    } else {
      hold.release();
      CHECK(create.get().exit_code == 0);  // the create had fewer steps: it completed
      CHECK(garm.run("DeleteInstance", {{"GARM_INSTANCE_ID", name}}).exit_code == 0);
      CHECK(server.host().holds_nothing_of(kController, name));
      break;
    }
    ++steps;
    INFO("held at " << hold.held_at());
    CHECK(create.get().exit_code != 0);  // SIGKILLed, as garm kills it
    auto deleting = std::async(std::launch::async, [&] {
      return garm.run("DeleteInstance", {{"GARM_INSTANCE_ID", name}});
    });
    // The delete arrives while the create is still held, then the create goes on.
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    hold.release();
    const auto deleted = deleting.get();
    INFO("delete: " << deleted.err);
    CHECK(deleted.exit_code == 0);
    // Whatever the create did after the delete returned has been undone by then or is
    // refused: nothing of the instance is left, now or a moment later.
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    CHECK(server.host().holds_nothing_of(kController, name));
    CHECK(garm.run("ListInstances", pool).out == "[]");
  }
  hold.arm(-1);
  UNSCOPED_INFO("the create was cut off at each of its " << steps << " hypervisor steps");
  CHECK(steps >= 4);  // the create was cut at each of its hypervisor steps
  CHECK(server.host().tagged_domain_count() == 0);
}

TEST_CASE("garm's proxy variables do not divert the provider's mTLS connection to the agent",
          "[provider]") {
  // garm passes http_proxy, https_proxy and no_proxy (both cases) from its own environment.
  ApiServer server;
  const Garm garm(server);
  const std::string nowhere = "http://127.0.0.1:9";  // nothing listens: a proxy used fails
  const std::map<std::string, std::string> proxies{
      {"http_proxy", nowhere},    {"https_proxy", nowhere}, {"HTTP_PROXY", nowhere},
      {"HTTPS_PROXY", nowhere},   {"ALL_PROXY", nowhere},   {"no_proxy", "example.com"},
      {"NO_PROXY", "example.com"}};
  auto with = [&](std::map<std::string, std::string> env) {
    env.insert(proxies.begin(), proxies.end());
    return env;
  };
  const auto created =
      garm.run("CreateInstance", with({{"GARM_POOL_ID", kPool}}), bootstrap_json("garm-proxied"));
  INFO(created.err);
  REQUIRE(created.exit_code == 0);
  CHECK(strict_json(garm.run("ListInstances", with({{"GARM_POOL_ID", kPool}}))).size() == 1);
  CHECK(garm.run("DeleteInstance", with({{"GARM_INSTANCE_ID", "garm-proxied"}})).exit_code == 0);
  CHECK(server.host().holds_nothing_of(kController, "garm-proxied"));
}

TEST_CASE("the provider takes a direct agent only under its own host name, and not revoked",
          "[provider][roles]") {
  ApiServer server;
  Garm garm(server);
  const auto& pki = server.pki();
  // A server certificate of the same CA for localhost, as a join token holder would get one
  // (the CA signed it), naming `host` as its holder's role.
  const auto serve_as = [&](const std::string& folder, const std::vector<std::string>& uris) {
    const auto dir = garm.dir() / folder;
    std::filesystem::create_directories(dir);
    std::filesystem::copy_file(pki / "ca.crt", dir / "ca.crt");
    const auto made = net::pki_make_request("x");
    std::ofstream(dir / "agent.key") << made.key_pem;
    const auto certificate = net::pki_sign_request(
        pki, made.request_pem,
        {.common_name = "x", .dns_names = {"localhost"}, .uri_names = uris, .server_auth = true});
    std::ofstream(dir / "agent.crt") << certificate;
    server.reload_from(dir);
    return net::certificate_facts(certificate).serial;
  };
  const auto list = [&] { return garm.run("ListInstances", {{"GARM_POOL_ID", kPool}}); };

  serve_as("impostor", {"urn:garm-edge:agent:r1-amd-02"});
  auto listed = list();
  CHECK(listed.exit_code == 1);  // never an empty list from another host
  CHECK_THAT(listed.err, Catch::Contains("host \"r1-amd-02\", not of host \"rack1\""));
  serve_as("client", {"urn:garm-edge:client:garm"});
  CHECK_THAT(list().err, Catch::Contains("which is no host"));

  const auto serial = serve_as("itself", {"urn:garm-edge:agent:rack1"});
  CHECK(list().exit_code == 0);

  // The CRL the hub writes names it: refused on the next call, no restart of anything.
  const auto crl = garm.dir() / "crl.pem";
  std::ofstream(crl) << net::pki_make_crl(
      pki, {{.serial = serial, .revoked_at_unix = std::time(nullptr)}}, 1, 30);
  std::ofstream(garm.config(), std::ios::app) << "crl = \"" << crl.string() << "\"\n";
  listed = list();
  CHECK(listed.exit_code == 1);
  CHECK_THAT(listed.err, Catch::Contains("revoked"));

  // Required: a certificate that names no host (pki init's) no longer passes.
  server.reload_from(pki);
  std::ofstream(garm.config(), std::ios::app) << "require_host_identity = true\n";
  CHECK_THAT(list().err, Catch::Contains("names no host"));
}

TEST_CASE("the operator refreshes a cache on every agent that has it for the client",
          "[provider][caches]") {
  ApiServer server("api.xml", [](agent::AgentConfig& config) {
    agent::CacheConfig docker;
    docker.name = "docker";
    docker.controller = kController;
    config.caches = {docker};
  });
  FakeCacheGenerations caches;
  server.service().use_cache_generations(caches);
  const Garm garm(server);
  const auto config = (garm.dir() / "provider.toml").string();
  const auto refreshed =
      run_program(kProvider, {"caches", "refresh", "docker", "--config", config});
  INFO(refreshed.out << refreshed.err);
  CHECK(refreshed.exit_code == 0);
  CHECK_THAT(refreshed.out, Catch::EndsWith(": refresh started\n"));
  CHECK(caches.refreshes_asked == 1);
  const auto unknown = run_program(kProvider, {"caches", "refresh", "nope", "--config", config});
  CHECK_THAT(unknown.out, Catch::Contains("skipped: this agent has no cache \"nope\""));
  CHECK(run_program(kProvider, {"caches", "refresh", "../x", "--config", config}).exit_code == 2);
}

TEST_CASE("a saved session says what its full handshake verified, and serves only that host",
          "[provider][certificates]") {
  ApiServer server;
  Garm garm(server);
  const auto session_text = [&] {
    for (const auto& entry : std::filesystem::directory_iterator(garm.dir() / "sessions")) {
      const auto text = read_file(entry.path()).value_or("");
      return text.substr(0, text.find('\n'));
    }
    return std::string();
  };
  REQUIRE(garm.run("GetInstance", {{"GARM_INSTANCE_ID", "garm-none"}}).exit_code == 30);
  const auto first = session_text();
  // The host it was verified for, the CAs (their SHA-256) and the agent's certificate's.
  CHECK_THAT(first, Catch::StartsWith("garm-edge-session 2 ") && Catch::EndsWith(" localhost"));
  REQUIRE(garm.run("GetInstance", {{"GARM_INSTANCE_ID", "garm-none"}}).exit_code == 30);
  CHECK(session_text() == first);  // resumed: the file is left as it is

  // The same agent under another name of its certificate: that session is not offered, a full
  // handshake verifies the agent for this name and saves its own.
  auto config = read_file(garm.config()).value_or("");
  const auto at = config.find("https://localhost:");
  config.replace(at, std::string("https://localhost:").size(), "https://127.0.0.1:");
  std::ofstream(garm.config(), std::ios::trunc) << config;
  REQUIRE(garm.run("GetInstance", {{"GARM_INSTANCE_ID", "garm-none"}}).exit_code == 30);
  CHECK_THAT(session_text(), Catch::EndsWith(" 127.0.0.1"));
}
