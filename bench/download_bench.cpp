// A runner archive through the agent's archive cache, as a guest's first request makes the
// agent download it: prints the seconds and the rate, for bench/images.sh to set beside curl's
// from the same server. Usage: garm-edge-download-bench URL SHA256 CA_FILE WORK_DIR
#include <chrono>
#include <cstdio>
#include <fstream>
#include <future>
#include <sstream>
#include <string>

#include "agent/base/clock.hpp"
#include "agent/runner_archives/archive_cache.hpp"

int main(int argc, char** argv) {
  using namespace garm_edge;
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s URL SHA256 CA_FILE WORK_DIR\n", argv[0]);
    return 2;
  }
  std::ifstream ca_file(argv[3]);
  std::ostringstream ca;
  ca << ca_file.rdbuf();
  agent::SystemClock clock;
  agent::StderrLogger log(agent::Level::warning);
  agent::RunnerArchiveCache cache(
      {.directory = argv[4], .max_bytes = 8ULL << 30U, .failure_memory = std::chrono::seconds(1)},
      std::make_shared<agent::HttpArchiveFetcher>(std::chrono::seconds(600)), clock, log);
  const agent::ArchiveSource source{
      .url = argv[1], .sha256 = argv[2], .bearer_token = "", .ca_bundle = ca.str(), .proxies = {}};
  std::promise<agent::RunnerArchiveCache::Outcome> done;
  const auto started = std::chrono::steady_clock::now();
  cache.fetch(source, "bench", [&done](agent::RunnerArchiveCache::Outcome outcome) {
    done.set_value(std::move(outcome));
  });
  const auto outcome = done.get_future().get();
  const auto seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  if (!outcome.file) {
    std::fprintf(stderr, "the download failed: %s\n", outcome.error.c_str());
    return 1;
  }
  const auto bytes = static_cast<double>(cache.stats().bytes);
  std::printf("%.3f s %.0f MiB/s\n", seconds, bytes / (1 << 20) / seconds);
  return 0;
}
