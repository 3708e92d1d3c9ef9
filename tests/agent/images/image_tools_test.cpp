// The host's xz, as pulls run it, on a stream built to cost the host.

#include "agent/images/image_tools.hpp"

#include <catch2/catch.hpp>

#include "agent/images/image_fetcher.hpp"
#include "common/temp_dir.hpp"
#include "support/run_command.hpp"

using namespace garm_edge;
using namespace garm_edge::agent;
using garm_edge::testing::run_command;

TEST_CASE("an xz stream of zeros past its promised size is stopped at the limit, not unpacked",
          "[images][integration]") {
  TempDir dir("xz-zeros");
  const auto bomb = dir.path() / "zeros.raw.xz";
  // 256 concatenated streams of 64 MiB of zeros: 16 GiB, in about 3 MiB.
  REQUIRE(run_command("head -c 67108864 /dev/zero | xz -0 > '" + dir.path().string() +
                      "/one.xz' && for i in $(seq 256); do cat '" + dir.path().string() +
                      "/one.xz'; done > '" + bomb.string() + "'")
              .exit_code == 0);
  // Unpacking it whole takes about 30 s of CPU: the tool's 10 s would end it first.
  HostImageTools tools(std::chrono::seconds(10));
  const std::atomic<bool> stop{false};
  const auto unpacked = dir.path() / "zeros.raw";
  CHECK_THROWS_WITH(
      tools.decompress_xz(bomb, unpacked, 1 << 20, stop),
      Catch::Contains("outgrew the 1048576 bytes") && !Catch::Contains("did not finish within"));
  CHECK(std::filesystem::file_size(unpacked) <= (1U << 20U));
}
