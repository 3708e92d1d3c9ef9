// The runner archive download against a real HTTPS server (the fake garm's /downloads/, with
// GitHub-style redirects) and a real CONNECT proxy.

#include "agent/runner_archives/archive_fetcher.hpp"

#include <fcntl.h>
#include <fstream>
#include <signal.h>
#include <thread>
#include <unistd.h>

#include <catch2/catch.hpp>

#include "common/temp_dir.hpp"
#include "common/unique_fd.hpp"
#include "integration/fake_garm.hpp"
#include "net/secret_token.hpp"
#include "support/run_command.hpp"

using namespace garm_edge;
using namespace garm_edge::testing;

namespace {

/// tests/integration/connect_proxy.py in the background, stopped with the object.
class ConnectProxy {
 public:
  ConnectProxy() {
    const auto script = std::filesystem::path(GARM_EDGE_TEST_DATA_DIR).parent_path() /
                        "integration/connect_proxy.py";
    const auto started =
        run_command("python3 '" + script.string() + "' --port-file '" + port_file().string() +
                    "' --log '" + log().string() + "' >/dev/null 2>&1 & echo $!");
    pid_ = std::stoi(started.output);
    for (int i = 0; i < 100 && !std::filesystem::exists(port_file()); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    std::ifstream(port_file()) >> port_;
    REQUIRE(port_ != 0);
  }
  ~ConnectProxy() { ::kill(pid_, SIGTERM); }
  ConnectProxy(const ConnectProxy&) = delete;
  ConnectProxy& operator=(const ConnectProxy&) = delete;

  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::string requests() const {
    std::ifstream in(log());
    return {std::istreambuf_iterator<char>(in), {}};
  }

 private:
  std::filesystem::path port_file() const { return directory_.path() / "port"; }
  std::filesystem::path log() const { return directory_.path() / "log"; }

  TempDir directory_{"connect-proxy"};
  int pid_ = 0;
  int port_ = 0;
};

struct Downloads {
  Downloads() { std::ofstream(directory.path() / "runner.tar.gz", std::ios::binary) << archive; }
  FakeGarm garm_with_downloads() {
    return FakeGarm(FakeGarmOptions{.plain = false,
                                    .instances = nlohmann::json::object(),
                                    .downloads = directory.path(),
                                    .download_rate = 0});
  }
  agent::ArchiveSource source(const FakeGarm& garm, const std::string& path) const {
    return {.url = garm.base_url() + path,
            .sha256 = net::sha256_hex(archive),
            .bearer_token = "ghes-temp-token",
            .ca_bundle = garm.pki().ca_pem(),
            .proxies = {}};
  }
  /// fetch() into a fresh file; the bytes written.
  std::string fetch(agent::ArchiveFetcher& fetcher, const agent::ArchiveSource& from) {
    const auto path = directory.path() / "out";
    std::filesystem::remove(path);
    UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
    const auto fetched = fetcher.fetch(from, fd.get(), 64 << 20U, stop);
    CHECK(fetched.size == archive.size());
    CHECK(fetched.sha256 == net::sha256_hex(archive));
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), {}};
  }

  TempDir directory{"downloads"};
  const std::string archive = std::string(5 << 20U, 'x') + "end";
  std::atomic<bool> stop{false};
};

}  // namespace

TEST_CASE(
    "the archive download follows GitHub's redirect and sends GHES's token only to the "
    "URL's own host",
    "[runner-archives][integration]") {
  Downloads downloads;
  auto garm = downloads.garm_with_downloads();
  agent::HttpArchiveFetcher fetcher(std::chrono::seconds(30));
  CHECK(downloads.fetch(fetcher, downloads.source(garm, "/redirect/runner.tar.gz")) ==
        downloads.archive);
  const auto requests = garm.requests();
  REQUIRE(requests.size() == 2);
  CHECK(requests[0]["path"] == "/redirect/runner.tar.gz");
  CHECK(requests[0]["headers"].value("Authorization", "") == "Bearer ghes-temp-token");
  CHECK(requests[1]["path"] == "/downloads/runner.tar.gz");
  CHECK(requests[1]["query"] == "signature=" + std::string(40, 'a'));  // the signed URL, whole
  // The redirect names the same host here, so the token goes along; resolve_redirect is what
  // decides the host, checked below.
  const auto from = agent::locate("https://github.com/actions/runner/releases/download/x.tgz");
  const auto to = agent::resolve_redirect(from, "https://objects.example/x?sig=1&b=2");
  CHECK(to.url.host == "objects.example");
  CHECK(to.target == "/x?sig=1&b=2");
  CHECK(agent::resolve_redirect(from, "/elsewhere?q").url.host == "github.com");
  CHECK(agent::resolve_redirect(from, "/elsewhere?q").target == "/elsewhere?q");
}

TEST_CASE("the archive download goes through the pool's proxy unless no_proxy names the host",
          "[runner-archives][integration]") {
  Downloads downloads;
  auto garm = downloads.garm_with_downloads();
  ConnectProxy proxy;
  agent::HttpArchiveFetcher fetcher(std::chrono::seconds(30));
  auto source = downloads.source(garm, "/downloads/runner.tar.gz");
  source.proxies = {.http_proxy = "", .https_proxy = proxy.url(), .no_proxy = "example.com"};
  CHECK(downloads.fetch(fetcher, source) == downloads.archive);
  CHECK(proxy.requests() == "CONNECT localhost:" + std::to_string(garm.port()) + "\n");

  source.proxies.no_proxy = "example.com, .localhost";
  CHECK(downloads.fetch(fetcher, source) == downloads.archive);
  CHECK(proxy.requests() == "CONNECT localhost:" + std::to_string(garm.port()) + "\n");
}

TEST_CASE("a failed archive download says why and where, never with the token",
          "[runner-archives][integration]") {
  Downloads downloads;
  auto garm = downloads.garm_with_downloads();
  agent::HttpArchiveFetcher fetcher(std::chrono::seconds(30));
  auto source = downloads.source(garm, "/downloads/missing.tar.gz");
  try {
    downloads.fetch(fetcher, source);
    FAIL("a 404 must fail the download");
  } catch (const agent::ArchiveError& e) {
    CHECK_THAT(e.what(), Catch::Contains("HTTP 404 from localhost:" + std::to_string(garm.port())));
    CHECK_THAT(e.what(), !Catch::Contains("ghes-temp-token"));
  }
  source.url = "http://127.0.0.1:1/x";  // nothing listens there
  CHECK_THROWS(downloads.fetch(fetcher, source));
  source = downloads.source(garm, "/downloads/runner.tar.gz");
  source.proxies.https_proxy = "http://user:secret@proxy:3128";
  CHECK_THROWS_WITH(downloads.fetch(fetcher, source), Catch::Contains("user info"));
}
