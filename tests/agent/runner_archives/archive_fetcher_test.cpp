// The runner archive download against a real HTTPS server (the fake garm's /downloads/, with
// GitHub-style redirects) and a real CONNECT proxy.

#include "agent/runner_archives/archive_fetcher.hpp"

#include <arpa/inet.h>
#include <array>
#include <fcntl.h>
#include <fstream>
#include <future>
#include <netinet/in.h>
#include <optional>
#include <signal.h>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>

#include <catch2/catch.hpp>

#include "common/temp_dir.hpp"
#include "common/unique_fd.hpp"
#include "net/secret_token.hpp"
#include "support/fake_garm.hpp"
#include "support/run_command.hpp"
#include "support/scripted_server.hpp"

using namespace garm_edge;
using namespace garm_edge::testing;

namespace {

/// tests/support/connect_proxy.py in the background, stopped with the object.
class ConnectProxy {
 public:
  ConnectProxy() {
    const auto script =
        std::filesystem::path(GARM_EDGE_TEST_DATA_DIR).parent_path() / "support/connect_proxy.py";
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
    const auto fetched = fetcher.fetch(from, fd.get(), any_size, stop);
    CHECK(fetched.size == archive.size());
    CHECK(fetched.sha256 == net::sha256_hex(archive));
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), {}};
  }

  TempDir directory{"downloads"};
  const std::string archive = std::string(5 << 20U, 'x') + "end";
  std::atomic<bool> stop{false};
  agent::WriteBudget any_size{.could_fit = [](std::uint64_t) { return true; },
                              .may_write = [](std::uint64_t) { return true; }};
};

/// A plain HTTP server on loopback that answers one request with a 200 head and 64 KiB of a
/// much longer body, then sends nothing more until the test ends.
class StalledServer {
 public:
  StalledServer() {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t size = sizeof(address);
    auto* raw = reinterpret_cast<sockaddr*>(&address);
    REQUIRE(::bind(listener_.get(), raw, size) == 0);
    REQUIRE(::listen(listener_.get(), 4) == 0);
    REQUIRE(::getsockname(listener_.get(), raw, &size) == 0);
    port_ = ntohs(address.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~StalledServer() {
    done_.set_value();
    ::shutdown(listener_.get(), SHUT_RDWR);
    thread_.join();
  }
  StalledServer(const StalledServer&) = delete;
  StalledServer& operator=(const StalledServer&) = delete;

  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_) + "/runner.tgz"; }

 private:
  void serve() {
    UniqueFd client(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (client.get() < 0) {
      return;
    }
    std::array<char, 4096> request{};
    (void)::recv(client.get(), request.data(), request.size(), 0);
    const std::string answer =
        "HTTP/1.1 200 OK\r\nContent-Length: 100000000\r\n\r\n" + std::string(64 << 10U, 'x');
    (void)::send(client.get(), answer.data(), answer.size(), MSG_NOSIGNAL);
    done_.get_future().wait();  // stalls, connection open
  }

  UniqueFd listener_{::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)};
  std::uint16_t port_ = 0;
  std::promise<void> done_;
  std::thread thread_;
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

  // A redirect to another origin (GitHub's signed URL on objects.githubusercontent.com) gets
  // no token: here from 127.0.0.1 over http to localhost over https.
  const auto before = garm.requests().size();
  ScriptedServer github("HTTP/1.1 302 Found\r\nLocation: " + garm.base_url() +
                        "/downloads/runner.tar.gz?sig=1&b=2\r\nContent-Length: 0\r\n\r\n");
  auto elsewhere = downloads.source(garm, "");
  elsewhere.url = github.url("/actions/runner/releases/download/x.tgz");
  CHECK(downloads.fetch(fetcher, elsewhere) == downloads.archive);
  REQUIRE(github.requests().size() == 1);
  CHECK_THAT(github.requests()[0], Catch::Contains("Authorization: Bearer ghes-temp-token"));
  const auto redirected = garm.requests();
  REQUIRE(redirected.size() == before + 1);
  CHECK(redirected.back()["query"] == "sig=1&b=2");
  CHECK(redirected.back()["headers"].value("Authorization", "") == "");
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

TEST_CASE("a download nobody wants ends within moments while its server sends nothing",
          "[runner-archives][integration]") {
  StalledServer server;
  TempDir directory("stalled");
  UniqueFd fd(::open((directory.path() / "out").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600));
  agent::HttpArchiveFetcher fetcher(std::chrono::seconds(60));
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> written{0};
  const agent::WriteBudget count{.could_fit = [](std::uint64_t) { return true; },
                                 .may_write =
                                     [&written](std::uint64_t more) {
                                       written += more;
                                       return true;
                                     }};
  const agent::ArchiveSource source{.url = server.url(),
                                    .sha256 = std::string(64, '0'),
                                    .bearer_token = "",
                                    .ca_bundle = "",
                                    .proxies = {}};
  auto download =
      std::async(std::launch::async, [&] { return fetcher.fetch(source, fd.get(), count, stop); });
  for (int i = 0; i < 500 && written < (64U << 10U); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  REQUIRE(written == (64U << 10U));  // the server sent its piece and stalls
  const auto stopped = std::chrono::steady_clock::now();
  stop = true;
  REQUIRE(download.wait_for(std::chrono::seconds(5)) == std::future_status::ready);
  CHECK(std::chrono::steady_clock::now() - stopped < std::chrono::seconds(2));
  CHECK_THROWS(download.get());  // without the stop it would wait for its 60 s deadline
}

TEST_CASE("an archive the cache has no room for ends its download, at its announced size",
          "[runner-archives][integration]") {
  Downloads downloads;
  auto garm = downloads.garm_with_downloads();
  agent::HttpArchiveFetcher fetcher(std::chrono::seconds(30));
  const auto out = downloads.directory.path() / "out";
  UniqueFd fd(::open(out.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600));
  std::uint64_t room = 1 << 20U;
  std::optional<std::uint64_t> announced;
  const agent::WriteBudget within_room{.could_fit =
                                           [&announced](std::uint64_t size) {
                                             announced = size;
                                             return true;  // as if it fit: the pieces decide
                                           },
                                       .may_write =
                                           [&room](std::uint64_t more) {
                                             if (more > room) {
                                               return false;
                                             }
                                             room -= more;
                                             return true;
                                           }};
  const auto source = downloads.source(garm, "/downloads/runner.tar.gz");
  CHECK_THROWS_WITH(fetcher.fetch(source, fd.get(), within_room, downloads.stop),
                    Catch::Contains("no room"));
  CHECK(std::filesystem::file_size(out) <= (1U << 20U));
  REQUIRE(announced);
  CHECK(*announced == downloads.archive.size());

  // Refused at its announced size: not a byte written.
  UniqueFd second(::open((downloads.directory.path() / "second").c_str(),
                         O_WRONLY | O_CREAT | O_CLOEXEC, 0600));
  const agent::WriteBudget too_small{.could_fit = [](std::uint64_t) { return false; },
                                     .may_write = [](std::uint64_t) { return true; }};
  CHECK_THROWS_WITH(fetcher.fetch(source, second.get(), too_small, downloads.stop),
                    Catch::Contains("no room for an archive of"));
  CHECK(std::filesystem::file_size(downloads.directory.path() / "second") == 0);
}
