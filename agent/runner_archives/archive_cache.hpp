#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "agent/base/clock.hpp"
#include "agent/base/log.hpp"
#include "agent/runner_archives/archive_fetcher.hpp"
#include "net/http_response.hpp"

namespace garm_edge::agent {

struct ArchiveCacheOptions {
  std::filesystem::path directory;
  /// The cache's size on disk; least recently used archives go first to make room.
  std::uint64_t max_bytes = 4ULL << 30U;
  /// A failed download is answered from memory this long before the next request tries again,
  /// so a broken URL does not cost one download per guest.
  std::chrono::seconds failure_memory{30};
};

/// Runner archives, each downloaded once per host and kept on disk under its SHA-256 (the name
/// garm's bootstrap gives it), verified before anyone is served it. Concurrent requests for
/// one archive from one source (URL, token, CA, proxy) share one download. At most four
/// downloads run at once, at most two of them for one controller; further ones wait in line.
/// One that no instance wants any more stops within moments, or leaves the line. Files are
/// written as `<sha256>.<random>.part`, counted with the archives against the cache's size,
/// synced and renamed, so after a crash a file named by a SHA-256 holds exactly those bytes.
class RunnerArchiveCache {
 public:
  /// Either the archive, open for reading, or why it cannot be had.
  struct Outcome {
    std::shared_ptr<net::FileBody> file;
    std::string error;
  };
  using Ready = std::function<void(Outcome)>;

  struct Stats {
    std::uint64_t hits = 0;    // requests answered from disk
    std::uint64_t waited = 0;  // requests answered when the download they waited for ended
    std::uint64_t failed_requests = 0;
    std::uint64_t downloads = 0;  // downloads that completed and verified
    std::uint64_t download_failures = 0;
    std::uint64_t cancelled = 0;  // downloads stopped because no instance wanted them any more
    std::uint64_t bytes_downloaded = 0;
    std::uint64_t evictions = 0;
    std::uint64_t archives = 0;    // on disk now
    std::uint64_t bytes = 0;       // on disk now
    std::uint64_t part_bytes = 0;  // in downloads under way now
  };

  /// Creates the directory (0700) if needed, removes partial files and learns what is there.
  /// Throws std::runtime_error when the directory cannot be used.
  RunnerArchiveCache(ArchiveCacheOptions options, std::shared_ptr<ArchiveFetcher> fetcher,
                     const Clock& clock, Logger& log);
  /// Drops every waiting callback uncalled, waits for callbacks already being called, and lets
  /// downloads in flight end on their own (they stop within moments and touch nothing of the
  /// caller).
  ~RunnerArchiveCache();
  RunnerArchiveCache(const RunnerArchiveCache&) = delete;
  RunnerArchiveCache& operator=(const RunnerArchiveCache&) = delete;

  /// Queues the download for `owner` (an instance's domain, of `controller`) unless the
  /// archive is on disk or failed a moment ago; joins the source's download when there is one.
  void prefetch(const ArchiveSource& source, const std::string& owner,
                const std::string& controller);
  /// `owner` is gone: a download that no other instance and no waiting guest wants stops
  /// within moments (or leaves the line), and its part file is removed.
  void release(const std::string& owner);
  /// Download threads running, cancelled ones that have not ended yet included.
  std::size_t downloads_under_way() const;
  /// Downloads waiting in line for a thread.
  std::size_t downloads_queued() const;
  /// Calls `ready` exactly once (unless the cache is destroyed first): at once when the
  /// archive is on disk or failed a moment ago, else when its download (queued for
  /// `controller` if there is none) ends, on the download's thread.
  void fetch(const ArchiveSource& source, const std::string& controller, Ready ready);

  Stats stats() const;
  /// The stats as Prometheus text.
  std::string render_metrics() const;

  struct State;  // shared with download threads, which may outlive the cache

 private:
  std::shared_ptr<State> state_;
};

}  // namespace garm_edge::agent
