// The host's registry mirror with real parts: Debian's docker-registry as the upstream (an image
// pushed there with skopeo from an OCI layout the test makes) and as the agent's mirror, guests
// pulling through the guest service with curl from their own addresses.
#include "agent/mirror/registry_mirror.hpp"

#include <csignal>
#include <fstream>
#include <regex>
#include <thread>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "common/temp_dir.hpp"
#include "net/secret_token.hpp"
#include "support/guest_host.hpp"
#include "support/run_command.hpp"

using namespace garm_edge;
using namespace garm_edge::testing;

namespace {

const std::string kRegistry = "/usr/bin/docker-registry";

std::uint16_t free_port() {
  asio::io_context io;
  asio::ip::tcp::acceptor acceptor(io, {asio::ip::make_address("127.0.0.1"), 0});
  return acceptor.local_endpoint().port();
}

bool answers(const std::string& url) {
  return run_command("curl -s -o /dev/null -m 2 -w '%{http_code}' '" + url + "'").output == "200";
}

/// curl's arguments for `path` on the mirror's unix socket.
std::string on_mirror(const agent::RegistryMirror& mirror, const std::string& path) {
  return "--unix-socket '" + mirror.socket().string() + "' 'http://localhost" + path + "'";
}

bool mirror_answers(const agent::RegistryMirror& mirror) {
  return run_command("curl -s -o /dev/null -m 2 -w '%{http_code}' " + on_mirror(mirror, "/v2/"))
             .output == "200";
}

/// A plain registry on loopback, its access log in a file: what the mirror fetches from it.
class UpstreamRegistry {
 public:
  UpstreamRegistry() : port_(free_port()) {
    const nlohmann::json config{
        {"version", "0.1"},
        {"log", {{"level", "info"}}},
        {"storage", {{"filesystem", {{"rootdirectory", (dir_.path() / "data").string()}}}}},
        {"http", {{"addr", "127.0.0.1:" + std::to_string(port_)}}}};
    std::ofstream(dir_.path() / "config.json") << config.dump();
    const auto started =
        run_command("exec " + kRegistry + " serve " + (dir_.path() / "config.json").string() +
                    " > " + log() + " 2>&1 & echo $!");
    pid_ = std::stoi(started.output);
    for (int i = 0; i < 100 && !answers(url() + "/v2/"); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    REQUIRE(answers(url() + "/v2/"));
  }
  ~UpstreamRegistry() { ::kill(pid_, SIGTERM); }
  UpstreamRegistry(const UpstreamRegistry&) = delete;
  UpstreamRegistry& operator=(const UpstreamRegistry&) = delete;

  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::string host() const { return "127.0.0.1:" + std::to_string(port_); }
  std::string log() const { return (dir_.path() / "access.log").string(); }
  /// How many times it answered a GET of the blob with 200.
  std::size_t blob_gets(const std::string& digest) const {
    std::ifstream in(log());
    std::size_t count = 0;
    for (std::string line; std::getline(in, line);) {
      if (line.find("\"GET /v2/team/sample/blobs/" + digest + " HTTP/1.1\" 200") !=
          std::string::npos) {
        ++count;
      }
    }
    return count;
  }

 private:
  TempDir dir_{"upstream-registry"};
  std::uint16_t port_;
  int pid_ = -1;
};

/// Pushes a one-layer image of `size` random bytes as team/sample:v1; returns its layer digest.
std::string push_sample(const UpstreamRegistry& upstream, std::size_t size) {
  TempDir layout("oci-layout");
  const auto made = run_command(std::string("python3 ") + GARM_EDGE_TEST_SOURCE_DIR +
                                "/agent/mirror/make_oci_layout.py " + layout.path().string() + " " +
                                std::to_string(size));
  REQUIRE(made.exit_code == 0);
  const auto copied =
      run_command("skopeo copy --quiet --insecure-policy --dest-tls-verify=false oci:" +
                  layout.path().string() + ":v1 docker://" + upstream.host() + "/team/sample:v1");
  INFO(copied.output);
  REQUIRE(copied.exit_code == 0);
  return made.output.substr(0, made.output.find('\n'));
}

std::string digest_of_bytes(const std::string& data) {
  return "sha256:" + net::sha256_hex(data);
}

const std::string kManifestAccept =
    "-H 'Accept: application/vnd.oci.image.manifest.v1+json' "
    "-H 'Accept: application/vnd.docker.distribution.manifest.v2+json'";

/// What a registry client does for one image, as the guest at `source`: the manifest, then
/// every blob it names, each checked against its digest. Returns the layer's bytes.
std::string pull_as_guest(const std::string& mirror, const std::string& source) {
  const auto manifest = curl_from(source, mirror + "/v2/team/sample/manifests/v1", kManifestAccept);
  REQUIRE(manifest.status == 200);
  const auto document = nlohmann::json::parse(manifest.body);
  const auto head =
      curl_from(source, mirror + "/v2/team/sample/manifests/v1", "-I " + kManifestAccept);
  CHECK(head.status == 200);
  CHECK_THAT(head.headers,
             Catch::Contains("Content-Length: " + std::to_string(manifest.body.size())) &&
                 Catch::Contains("docker-content-digest: " + digest_of_bytes(manifest.body)));
  std::string layer;
  for (const auto& described : {document["config"], document["layers"][0]}) {
    const auto digest = described["digest"].get<std::string>();
    const auto blob = curl_from(source, mirror + "/v2/team/sample/blobs/" + digest,
                                "-H 'Authorization: Bearer a-job-secret'");
    REQUIRE(blob.status == 200);
    CHECK(digest_of_bytes(blob.body) == digest);
    layer = blob.body;
  }
  return layer;
}

/// Blobs the mirror holds on disk.
std::size_t stored_blobs(const agent::RegistryMirror& mirror) {
  std::size_t count = 0;
  std::error_code ec;
  for (std::filesystem::recursive_directory_iterator it(mirror.blob_root(), ec), end;
       !ec && it != end; it.increment(ec)) {
    count += it->path().filename() == "data" ? 1U : 0U;
  }
  return count;
}

/// The mirror stores a blob beside serving it (distribution 2.8): until it is on disk, another
/// pull of it goes upstream again.
void wait_until_stored(const agent::RegistryMirror& mirror, std::size_t blobs) {
  for (int i = 0; i < 200 && stored_blobs(mirror) < blobs; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  REQUIRE(stored_blobs(mirror) >= blobs);
}

}  // namespace

TEST_CASE(
    "guests pull through the host's mirror: a second pull costs upstream nothing, nobody else gets "
    "in",
    "[mirror][integration]") {
  REQUIRE(
      std::filesystem::exists(kRegistry));  // Debian's docker-registry (scripts/install-deps.sh)
  UpstreamRegistry upstream;
  const auto layer_digest = push_sample(upstream, 2 * 1024 * 1024);
  FakeGarm garm;
  TempDir mirror_dir("mirror");
  GuestHost guests(garm, true, [&](agent::AgentConfig& config) {
    config.mirror.enabled = true;
    config.mirror.upstream = upstream.url();
    config.mirror.directory = mirror_dir.path();
    config.mirror.registry = kRegistry;
  });
  agent::RegistryMirror mirror(guests.host.config, guests.host.log);
  mirror.start();
  guests.guests->serve_mirror({.socket = mirror.socket(), .blob_root = mirror.blob_root()});

  guests.service->create(kControllerId, guests.bootstrap("garm-mirror01", kControllerId.str()));
  const auto record = guests.host.store.get(agent::domain_name_for(kController, "garm-mirror01"));
  REQUIRE(record);
  const auto address = record->guest->ip;
  CHECK_THAT(record->guest->user_data,
             Catch::Contains("garm-edge-registry-mirror") && Catch::Contains(guests.base_url()));

  const auto first = pull_as_guest(guests.base_url(), address);
  wait_until_stored(mirror, 3);  // manifest, config, layer
  // distribution 2.8's proxy fetches a missing blob twice, once for the guest and once for its
  // store (3.0 tees them): the first pull costs the layer up to twice, every later one nothing.
  const auto upstream_after_first = upstream.blob_gets(layer_digest);
  CHECK(upstream_after_first >= 1);
  CHECK(upstream_after_first <= 2);
  const auto second = pull_as_guest(guests.base_url(), address);
  CHECK(first.size() > 2 * 1024 * 1024);  // the gzip of random bytes is no smaller
  CHECK(second == first);
  CHECK(upstream.blob_gets(layer_digest) == upstream_after_first);
  const auto metrics = guests.guests->render_metrics();
  CHECK_THAT(metrics, Catch::Contains("garm_edge_mirror_blobs_total{outcome=\"hit\"} 2") &&
                          Catch::Contains("garm_edge_mirror_blobs_total{outcome=\"miss\"} 2"));
  const std::regex saved("garm_edge_mirror_saved_bytes_total ([0-9]+)");
  std::smatch match;
  REQUIRE(std::regex_search(metrics, match, saved));
  CHECK(std::stoull(match[1]) > first.size());  // the layer and the config, from the host

  // Only pulls, only from guests.
  CHECK(
      curl_from(address, guests.base_url() + "/v2/team/sample/blobs/uploads/", "-X POST").status ==
      405);
  CHECK(curl_from("127.0.0.50", guests.base_url() + "/v2/team/sample/manifests/v1", "").status ==
        0);
  CHECK(
      curl_from(address, guests.base_url() + "/v2/team/../../etc/passwd", "--path-as-is").status ==
      400);
  // The catalog would name every repository any tenant pulled.
  CHECK(curl_from(address, guests.base_url() + "/v2/_catalog", "").status == 403);
  CHECK(curl_from(address, guests.base_url() + "/v2/%5Fcatalog", "").status == 400);
  CHECK(curl_from(address, guests.base_url() + "/v2/_c%61talog", "").status == 400);

  // No other account of the host reaches the registry (it pulls with the operator's
  // credentials): it listens on a unix socket in the agent's 0700 directory, not on loopback.
  CHECK(mirror.socket().parent_path() == mirror_dir.path());
  CHECK(std::filesystem::status(mirror_dir.path()).permissions() ==
        std::filesystem::perms::owner_all);
  CHECK(run_command("curl -s -o /dev/null -w '%{http_code}' " + on_mirror(mirror, "/v2/")).output ==
        "200");
  if (::geteuid() == 0) {
    const auto as_nobody = run_command("runuser -u nobody -- curl -s -o /dev/null -m 2 " +
                                       on_mirror(mirror, "/v2/team/sample/manifests/v1"));
    CHECK(as_nobody.exit_code == 7);  // could not connect
  }
}

TEST_CASE("the mirror is restarted when it dies, and emptied when it outgrows its bound",
          "[mirror][integration]") {
  REQUIRE(std::filesystem::exists(kRegistry));
  UpstreamRegistry upstream;
  push_sample(upstream, 512 * 1024);
  TempDir state("mirror-state");
  agent::AgentConfig config;
  config.state_dir = state.path() / "state";
  config.mirror.enabled = true;
  config.mirror.upstream = upstream.url();
  config.mirror.registry = kRegistry;
  config.mirror.max_bytes = 256 * 1024;
  CapturingLogger log;
  agent::RegistryMirror mirror(config, log);
  mirror.start();
  CHECK(config.mirror_directory() == state.path() / "state-mirror");
  CHECK(std::filesystem::status(config.mirror_directory()).permissions() ==
        std::filesystem::perms::owner_all);
  const auto blob =
      run_command("curl -sf -o /dev/null -w '%{size_download}' " +
                  on_mirror(mirror, "/v2/team/sample/manifests/v1") + " " + kManifestAccept);
  REQUIRE(blob.exit_code == 0);
  const auto layer =
      nlohmann::json::parse(run_command("curl -sf " +
                                        on_mirror(mirror, "/v2/team/sample/manifests/v1") + " " +
                                        kManifestAccept)
                                .output)["layers"][0]["digest"]
          .get<std::string>();
  REQUIRE(
      run_command("curl -sf -o /dev/null " + on_mirror(mirror, "/v2/team/sample/blobs/" + layer))
          .exit_code == 0);
  wait_until_stored(mirror, 2);  // manifest, layer
  mirror.enforce_bound();
  for (int i = 0; i < 100 && std::filesystem::exists(mirror.blob_root()); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  CHECK_FALSE(std::filesystem::exists(mirror.blob_root()));
  for (int i = 0; i < 100 && !mirror_answers(mirror); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  CHECK(mirror_answers(mirror));
  CHECK_THAT(mirror.render_metrics(), Catch::Contains("garm_edge_mirror_flushes_total 1"));

  // Killed from outside: back within its 5 s restart delay.
  run_command("pkill -KILL -f '" + (config.mirror_directory() / "registry.json").string() + "'");
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  for (int i = 0; i < 150 && !mirror_answers(mirror); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  CHECK(mirror_answers(mirror));
  CHECK_THAT(mirror.render_metrics(), Catch::Contains("garm_edge_mirror_restarts_total 1"));
}
