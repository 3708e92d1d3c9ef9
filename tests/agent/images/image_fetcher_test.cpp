// The image fetcher against a hand-made server that misbehaves on purpose: it trickles
// nothing, or redirects where no download may go.

#include "agent/images/image_fetcher.hpp"

#include <catch2/catch.hpp>

#include "support/scripted_server.hpp"

using namespace garm_edge;
using namespace garm_edge::agent;
using garm_edge::testing::ScriptedServer;

namespace {

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
