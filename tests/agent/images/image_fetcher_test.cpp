// The image fetcher against a hand-made server that misbehaves on purpose: it trickles
// nothing, or redirects where no download may go.

#include "agent/images/image_fetcher.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <thread>

#include <catch2/catch.hpp>

#include "common/unique_fd.hpp"

using namespace garm_edge;
using namespace garm_edge::agent;

namespace {

/// Answers every connection on a loopback port with `answer`, then holds it open (silent)
/// until destroyed.
class ScriptedServer {
 public:
  explicit ScriptedServer(std::string answer)
      : answer_(std::move(answer)), listener_(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t size = sizeof address;
    REQUIRE(::bind(listener_.get(), reinterpret_cast<sockaddr*>(&address), size) == 0);
    REQUIRE(::listen(listener_.get(), 4) == 0);
    REQUIRE(::getsockname(listener_.get(), reinterpret_cast<sockaddr*>(&address), &size) == 0);
    port_ = ntohs(address.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~ScriptedServer() {
    ::shutdown(listener_.get(), SHUT_RDWR);
    thread_.join();
  }
  std::string url(const std::string& path) const {
    return "http://127.0.0.1:" + std::to_string(port_) + path;
  }

 private:
  void serve() {
    std::vector<UniqueFd> held;
    for (;;) {
      UniqueFd connection(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
      if (connection.get() < 0) {
        return;
      }
      char request[4096];
      [[maybe_unused]] const auto got = ::recv(connection.get(), request, sizeof request, 0);
      [[maybe_unused]] const auto sent =
          ::send(connection.get(), answer_.data(), answer_.size(), MSG_NOSIGNAL);
      held.push_back(std::move(connection));
    }
  }

  std::string answer_;
  UniqueFd listener_;
  std::uint16_t port_ = 0;
  std::thread thread_;
};

class CountingSink final : public ImageSink {
 public:
  void begin(std::uint64_t, std::optional<std::uint64_t>) override {}
  void take(std::string_view piece) override { bytes += piece.size(); }
  std::size_t bytes = 0;
};

}  // namespace

TEST_CASE("a source that goes silent is given up after stall_seconds, and the error names it",
          "[images][integration]") {
  ScriptedServer trickle("HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\nfirst bytes");
  PullConfig limits;
  limits.stall = std::chrono::seconds(1);
  limits.timeout = std::chrono::seconds(120);
  HttpImageFetcher fetcher(limits);
  CountingSink sink;
  const std::atomic<bool> stop{false};
  const auto started = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(fetcher.fetch(trickle.url("/disk.raw"), 0, sink, stop),
                    Catch::Contains("the source sent nothing for 1 s ([pull] stall_seconds)"));
  CHECK(sink.bytes == 11);
  // Given up at the stall, not at the two-minute timeout.
  CHECK(std::chrono::steady_clock::now() - started < std::chrono::seconds(30));
}

TEST_CASE("a redirect to file:// is refused as the redirect it is", "[images][integration]") {
  ScriptedServer redirect(
      "HTTP/1.1 302 Found\r\nLocation: file:///etc/shadow\r\nContent-Length: 0\r\n\r\n");
  HttpImageFetcher fetcher(PullConfig{});
  CountingSink sink;
  const std::atomic<bool> stop{false};
  CHECK_THROWS_WITH(fetcher.fetch(redirect.url("/disk.raw"), 0, sink, stop),
                    Catch::Contains("redirected to a location that is not followed") &&
                        Catch::Contains("scheme"));
  CHECK(sink.bytes == 0);
}
