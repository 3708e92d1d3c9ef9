// The runner archive cache against a fetcher that plays the internet: one download for many
// guests, nothing unverified kept or served, least recently used out, a restart keeps what was
// verified.

#include "agent/runner_archives/archive_cache.hpp"

#include <condition_variable>
#include <fstream>
#include <future>
#include <thread>
#include <unistd.h>

#include <catch2/catch.hpp>

#include "common/temp_dir.hpp"
#include "net/secret_token.hpp"
#include "support/quiet_logger.hpp"
#include "support/settable_clock.hpp"

using garm_edge::testing::QuietLogger;
using namespace garm_edge;
using agent::RunnerArchiveCache;

namespace {

using garm_edge::testing::SettableClock;

const std::string kControllerA = "controller-a";
const std::string kControllerB = "controller-b";

/// Serves archives from memory in 64 KiB pieces, its size and each piece asked of the cache's
/// budget, counting
/// downloads; `hold` keeps every download waiting (before its first piece, or after `pause_at`
/// bytes) until `release`, as a stalled server would.
class FakeInternet final : public agent::ArchiveFetcher {
 public:
  std::map<std::string, std::string> archives;  // by URL
  std::atomic<int> downloads{0};
  std::atomic<int> paused{0};  // downloads waiting in `hold` now
  std::uint64_t pause_at = 0;
  bool announce_size = true;  // a Content-Length; false: chunked

  agent::FetchedArchive fetch(const agent::ArchiveSource& source, int fd,
                              const agent::WriteBudget& budget,
                              const std::atomic<bool>& stop) override {
    ++downloads;
    const auto it = archives.find(source.url);
    if (it != archives.end() && announce_size && !budget.could_fit(it->second.size())) {
      throw agent::ArchiveError("no room for its size");
    }
    std::string_view left = it == archives.end() ? std::string_view() : it->second;
    for (std::uint64_t written = 0;; written += kPiece) {
      if (written == pause_at) {
        wait_while_held(stop);
      }
      if (it == archives.end()) {
        throw agent::ArchiveError("HTTP 404 from " + source.url);
      }
      if (left.empty()) {
        break;
      }
      const auto piece = left.substr(0, kPiece);
      if (!budget.may_write(piece.size())) {
        throw agent::ArchiveError("no room");
      }
      // Not REQUIRE: this runs on the cache's download thread.
      if (::write(fd, piece.data(), piece.size()) != static_cast<ssize_t>(piece.size())) {
        throw agent::ArchiveError("short write");
      }
      left.remove_prefix(piece.size());
    }
    return {.sha256 = net::sha256_hex(it->second), .size = it->second.size()};
  }

  void hold() {
    std::lock_guard lock(mutex_);
    held_ = true;
  }
  void release() {
    {
      std::lock_guard lock(mutex_);
      held_ = false;
    }
    released_.notify_all();
  }
  /// Waits up to 5 s until `count` downloads wait in `hold`.
  bool paused_within(int count) const {
    for (int i = 0; i < 500 && paused < count; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return paused >= count;
  }

 private:
  static constexpr std::size_t kPiece = 64 << 10U;

  void wait_while_held(const std::atomic<bool>& stop) {
    std::unique_lock lock(mutex_);
    ++paused;
    // As the real fetcher does within moments: a stop ends the wait.
    while (held_ && !stop) {
      released_.wait_for(lock, std::chrono::milliseconds(10));
    }
    --paused;
    if (stop) {
      throw agent::ArchiveError("stopped");
    }
  }

  std::mutex mutex_;
  std::condition_variable released_;
  bool held_ = false;
};

std::string read_all(const net::FileBody& file) {
  std::string data(static_cast<std::size_t>(file.size), '\0');
  REQUIRE(::pread(file.fd.get(), data.data(), data.size(), 0) == static_cast<ssize_t>(data.size()));
  return data;
}

agent::ArchiveSource source_for(const std::string& url, const std::string& content) {
  return {.url = url,
          .sha256 = net::sha256_hex(content),
          .bearer_token = "",
          .ca_bundle = "",
          .proxies = {}};
}

struct ArchiveHost {
  TempDir directory{"archive-cache"};
  std::shared_ptr<FakeInternet> internet = std::make_shared<FakeInternet>();
  SettableClock clock;
  QuietLogger log;

  std::unique_ptr<RunnerArchiveCache> cache(std::uint64_t max_bytes = 64 << 20U) {
    return std::make_unique<RunnerArchiveCache>(
        agent::ArchiveCacheOptions{.directory = directory.path(),
                                   .max_bytes = max_bytes,
                                   .failure_memory = std::chrono::seconds(30)},
        internet, clock, log);
  }

  /// fetch(), waited for.
  static RunnerArchiveCache::Outcome fetch(RunnerArchiveCache& cache,
                                           const agent::ArchiveSource& source,
                                           const std::string& controller = kControllerA) {
    std::promise<RunnerArchiveCache::Outcome> done;
    auto outcome = done.get_future();
    cache.fetch(source, controller,
                [&done](RunnerArchiveCache::Outcome got) { done.set_value(std::move(got)); });
    REQUIRE(outcome.wait_for(std::chrono::seconds(20)) == std::future_status::ready);
    return outcome.get();
  }

  std::vector<std::string> files() const {
    std::vector<std::string> names;
    for (const auto& item : std::filesystem::directory_iterator(directory.path())) {
      names.push_back(item.path().filename().string());
    }
    std::sort(names.begin(), names.end());
    return names;
  }
};

}  // namespace

TEST_CASE("guests asking for one archive at once share one download", "[runner-archives]") {
  ArchiveHost host;
  const std::string archive(3 << 20U, 'r');
  host.internet->archives["https://dl/runner.tgz"] = archive;
  const auto source = source_for("https://dl/runner.tgz", archive);
  auto cache = host.cache();
  host.internet->hold();
  cache->prefetch(source, "garm-create", kControllerA);  // the create
  constexpr int kGuests = 8;
  std::vector<std::promise<RunnerArchiveCache::Outcome>> answers(kGuests);
  for (auto& answer : answers) {
    cache->fetch(source, kControllerA,
                 [&answer](RunnerArchiveCache::Outcome got) { answer.set_value(std::move(got)); });
  }
  host.internet->release();
  for (auto& answer : answers) {
    auto future = answer.get_future();
    REQUIRE(future.wait_for(std::chrono::seconds(20)) == std::future_status::ready);
    const auto got = future.get();
    REQUIRE(got.file);
    CHECK(read_all(*got.file) == archive);
  }
  CHECK(host.internet->downloads == 1);
  // Later guests are served from disk.
  CHECK(read_all(*ArchiveHost::fetch(*cache, source).file) == archive);
  CHECK(host.internet->downloads == 1);
  const auto stats = cache->stats();
  CHECK(stats.downloads == 1);
  CHECK(stats.bytes_downloaded == archive.size());
  CHECK(stats.hits == 1);
  CHECK(host.files() == std::vector<std::string>{source.sha256});
}

TEST_CASE("an archive whose SHA-256 is not garm's is never kept or served", "[runner-archives]") {
  ArchiveHost host;
  host.internet->archives["https://dl/runner.tgz"] = "tampered bytes";
  auto source = source_for("https://dl/runner.tgz", "the real archive");
  auto cache = host.cache();
  const auto got = ArchiveHost::fetch(*cache, source);
  CHECK_FALSE(got.file);
  CHECK_THAT(got.error, Catch::Contains("garm's bootstrap says " + source.sha256));
  CHECK_THAT(got.error, Catch::Contains(net::sha256_hex("tampered bytes")));
  CHECK(host.files().empty());  // no part file, nothing under the promised name

  // The failure is remembered for a while: guests retrying do not each cost a download.
  CHECK(ArchiveHost::fetch(*cache, source).error == got.error);
  cache->prefetch(source, "garm-create", kControllerA);
  CHECK(host.internet->downloads == 1);
  // Then the next request tries again, and a fixed source is served.
  host.clock.advance(std::chrono::seconds(31));
  host.internet->archives["https://dl/runner.tgz"] = "the real archive";
  CHECK(read_all(*ArchiveHost::fetch(*cache, source).file) == "the real archive");
  CHECK(host.internet->downloads == 2);
  CHECK(cache->stats().download_failures == 1);
}

TEST_CASE("a failed download is an error for every guest waiting on it", "[runner-archives]") {
  ArchiveHost host;
  auto cache = host.cache();
  const auto got = ArchiveHost::fetch(*cache, source_for("https://dl/missing.tgz", "x"));
  CHECK_FALSE(got.file);
  CHECK_THAT(got.error, Catch::Contains("HTTP 404"));
  CHECK(host.files().empty());
}

TEST_CASE("the cache stays within its size, least recently used out", "[runner-archives]") {
  ArchiveHost host;
  const std::string a(1 << 20U, 'a'), b(1 << 20U, 'b'), c(1 << 20U, 'c'), d(1 << 20U, 'd');
  for (const auto& [name, content] : {std::pair{"a", a}, {"b", b}, {"c", c}, {"d", d}}) {
    host.internet->archives[std::string("https://dl/") + name] = content;
  }
  auto cache = host.cache(3 << 20U);
  for (const auto& [name, content] : {std::pair{"a", a}, {"b", b}, {"c", c}}) {
    REQUIRE(
        ArchiveHost::fetch(*cache, source_for(std::string("https://dl/") + name, content)).file);
    host.clock.advance(std::chrono::seconds(1));
  }
  const auto served_a =
      ArchiveHost::fetch(*cache, source_for("https://dl/a", a));  // a is fresh again
  host.clock.advance(std::chrono::seconds(1));
  REQUIRE(ArchiveHost::fetch(*cache, source_for("https://dl/d", d)).file);
  const auto stats = cache->stats();
  CHECK(stats.evictions == 1);
  CHECK(stats.bytes == 3U << 20U);
  std::vector<std::string> expected = {net::sha256_hex(a), net::sha256_hex(c), net::sha256_hex(d)};
  std::sort(expected.begin(), expected.end());
  CHECK(host.files() == expected);       // b went
  CHECK(read_all(*served_a.file) == a);  // a file being served survives its own eviction too

  // An archive larger than the whole cache is refused, and evicts nothing.
  const std::string huge(4 << 20U, 'h');
  host.internet->archives["https://dl/huge"] = huge;
  CHECK_FALSE(ArchiveHost::fetch(*cache, source_for("https://dl/huge", huge)).file);
  CHECK(host.files() == expected);
}

TEST_CASE("a restarted agent keeps verified archives and drops unfinished ones",
          "[runner-archives]") {
  ArchiveHost host;
  const std::string archive(1 << 20U, 'k');
  host.internet->archives["https://dl/k"] = archive;
  const auto source = source_for("https://dl/k", archive);
  REQUIRE(ArchiveHost::fetch(*host.cache(), source).file);
  std::ofstream(host.directory.path() / (source.sha256 + ".abc.part")) << "half";
  auto restarted = host.cache();
  CHECK(host.files() == std::vector<std::string>{source.sha256});
  CHECK(read_all(*ArchiveHost::fetch(*restarted, source).file) == archive);
  CHECK(host.internet->downloads == 1);
  CHECK(restarted->stats().archives == 1);
}

TEST_CASE("a cache destroyed during a download calls no one and leaves no part file",
          "[runner-archives]") {
  ArchiveHost host;
  host.internet->archives["https://dl/slow"] = "slow";
  const auto source = source_for("https://dl/slow", "slow");
  std::atomic<bool> called{false};
  {
    auto cache = host.cache();
    host.internet->hold();
    cache->fetch(source, kControllerA, [&called](RunnerArchiveCache::Outcome) { called = true; });
    while (host.internet->downloads == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  host.internet->release();
  for (int i = 0; i < 200 && !host.files().empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  CHECK_FALSE(called);
  CHECK(host.files().empty());
}

TEST_CASE("a download no instance wants any more stops and leaves no part file",
          "[runner-archives]") {
  ArchiveHost host;
  host.internet->archives["https://dl/runner.tgz"] = "runner";
  const auto source = source_for("https://dl/runner.tgz", "runner");
  auto cache = host.cache();
  host.internet->hold();
  cache->prefetch(source, "garm-a", kControllerA);
  cache->prefetch(source, "garm-b", kControllerA);  // two creates of one archive share it
  cache->release("garm-a");
  CHECK(cache->downloads_under_way() == 1);  // b still wants it
  cache->release("garm-b");
  // The internet still holds the download: only the cancellation can end it.
  for (int i = 0; i < 500 && cache->downloads_under_way() > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  CHECK(cache->downloads_under_way() == 0);
  CHECK(cache->stats().cancelled == 1);
  CHECK(host.files().empty());  // neither kept nor left as a part file
  host.internet->release();
}

TEST_CASE("another source naming the same SHA-256 neither joins a download nor spoils it",
          "[runner-archives]") {
  ArchiveHost host;
  host.internet->archives["https://dl/runner.tgz"] = "runner";
  const auto honest = source_for("https://dl/runner.tgz", "runner");
  const auto wrong = source_for("https://elsewhere/slow.tgz", "runner");
  auto cache = host.cache();
  host.internet->hold();
  std::promise<RunnerArchiveCache::Outcome> wrong_answer;
  std::promise<RunnerArchiveCache::Outcome> honest_answer;
  cache->fetch(wrong, kControllerB,
               [&](RunnerArchiveCache::Outcome got) { wrong_answer.set_value(got); });
  cache->fetch(honest, kControllerA,
               [&](RunnerArchiveCache::Outcome got) { honest_answer.set_value(got); });
  CHECK(cache->downloads_under_way() == 2);
  // Both at the server: a thread that started after the honest one finished would find the
  // verified bytes on disk and be served them, which is right but not what this case tests.
  REQUIRE(host.internet->paused_within(2));
  host.internet->release();
  const auto failed = wrong_answer.get_future().get();
  const auto served = honest_answer.get_future().get();
  CHECK_THAT(failed.error, Catch::Contains("elsewhere"));
  REQUIRE(served.file);
  CHECK(read_all(*served.file) == "runner");
  CHECK(served.error.empty());
}

TEST_CASE("four downloads run at once, two per controller, the others wait in line",
          "[runner-archives]") {
  ArchiveHost host;
  auto cache = host.cache();
  host.internet->hold();
  std::vector<agent::ArchiveSource> sources;
  for (int i = 0; i < 7; ++i) {
    const auto content = "archive " + std::to_string(i);
    host.internet->archives["https://dl/" + std::to_string(i)] = content;
    sources.push_back(source_for("https://dl/" + std::to_string(i), content));
  }
  // Controller A's three stalled URLs first: two run, the third waits for A's own share.
  for (std::size_t i = 0; i < 3; ++i) {
    cache->prefetch(sources[i], "garm-a" + std::to_string(i), kControllerA);
  }
  REQUIRE(host.internet->paused_within(2));
  CHECK(cache->downloads_under_way() == 2);
  // Controller B's get a thread, but its second never the last free one ...
  for (std::size_t i = 3; i < 6; ++i) {
    cache->prefetch(sources[i], "garm-b" + std::to_string(i), kControllerB);
  }
  REQUIRE(host.internet->paused_within(3));
  CHECK(cache->downloads_under_way() == 3);
  // ... which a third controller's download takes.
  cache->prefetch(sources[6], "garm-c6", "controller-c");
  REQUIRE(host.internet->paused_within(4));
  CHECK(cache->downloads_under_way() == 4);
  CHECK(cache->downloads_queued() == 3);
  // A queued download nobody wants leaves the line without ever running.
  cache->release("garm-a2");
  CHECK(cache->downloads_queued() == 2);
  host.internet->release();
  CHECK(read_all(*ArchiveHost::fetch(*cache, sources[5], kControllerB).file) == "archive 5");
  for (int i = 0; i < 500 && cache->downloads_under_way() > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  CHECK(cache->stats().downloads == 6);
  CHECK(host.internet->downloads == 6);
}

TEST_CASE("part files count against the cache's size while they grow", "[runner-archives]") {
  ArchiveHost host;
  const std::string a(1 << 20U, 'a'), b(2 << 20U, 'b'), c(2 << 20U, 'c');
  for (const auto& [name, content] : {std::pair{"a", a}, {"b", b}, {"c", c}}) {
    host.internet->archives[std::string("https://dl/") + name] = content;
  }
  auto cache = host.cache(3 << 20U);
  REQUIRE(ArchiveHost::fetch(*cache, source_for("https://dl/a", a)).file);
  // b and c come chunked and both stall after 1.5 MiB: a goes to make room for the second
  // part file.
  host.internet->announce_size = false;
  host.internet->pause_at = 3 << 19U;
  host.internet->hold();
  std::promise<RunnerArchiveCache::Outcome> got_b;
  std::promise<RunnerArchiveCache::Outcome> got_c;
  cache->fetch(source_for("https://dl/b", b), kControllerA,
               [&](RunnerArchiveCache::Outcome got) { got_b.set_value(got); });
  cache->fetch(source_for("https://dl/c", c), kControllerB,
               [&](RunnerArchiveCache::Outcome got) { got_c.set_value(got); });
  REQUIRE(host.internet->paused_within(2));
  CHECK(cache->stats().part_bytes == 3U << 20U);
  CHECK(cache->stats().bytes == 0);  // a was evicted for them
  CHECK(cache->stats().evictions == 1);
  // Both cannot finish within 3 MiB: whichever goes on first finds no room (the other may
  // complete once that one's part file is gone, or find no room too).
  host.internet->release();
  const auto b_outcome = got_b.get_future().get();
  const auto c_outcome = got_c.get_future().get();
  const auto served = (b_outcome.file ? 1U : 0U) + (c_outcome.file ? 1U : 0U);
  CHECK(served <= 1);  // without counting part files: both, the disk at 5 MiB on the way
  CHECK_THAT(b_outcome.error + c_outcome.error, Catch::Contains("no room"));
  CHECK(cache->stats().part_bytes == 0);
  CHECK(host.files().size() == served);  // no part file left
}
