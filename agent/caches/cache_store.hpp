#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "agent/base/clock.hpp"
#include "agent/base/config.hpp"
#include "agent/base/log.hpp"
#include "agent/base/retired_files.hpp"
#include "agent/caches/cache_disk_tools.hpp"
#include "agent/instances/cache_generations.hpp"

namespace garm_edge::agent {

/// How the last refresh of a cache ended.
struct RefreshOutcome {
  bool ok = false;
  std::string finished_at;  // RFC 3339
  double seconds = 0;
  std::string error;  // why it failed; the last good generation stays
};

/// Where one cache stands, for `caches list`, capacity and metrics.
struct CacheState {
  std::string name;
  std::optional<CacheGeneration> current;
  std::string current_made_at;  // RFC 3339
  std::size_t retired = 0;      // replaced generations still on disk (guests hold them)
  bool refreshing = false;
  std::optional<RefreshOutcome> last_refresh;
  std::uint64_t refreshes_ok = 0;
  std::uint64_t refreshes_failed = 0;
};

/// The two disks a refresh's builder gets: a writable copy of the current generation (an
/// overlay; an empty disk of the cache's size for its first) and a small raw disk it writes
/// its exit status and output to.
struct RefreshDisks {
  std::filesystem::path work;
  std::filesystem::path status;
  std::uint64_t next_generation = 0;
};

/// Cache generations on disk (docs/caches.md): `<caches_dir>/<name>/gen-<n>.qcow2`, never written
/// after they are made, and `generations.json`, the record of which one new guests get. A
/// generation is swapped in atomically; replaced ones are removed by the same rule as replaced
/// image bases (RetiredFiles): once no overlay backs onto them.
class CacheStore {
 public:
  /// Reads every cache's record; throws ConfigError when the directory cannot be made.
  CacheStore(const AgentConfig& config, CacheDiskTools& tools, const Clock& clock, Logger& log);

  /// The generation new guests get; nothing while the cache has none.
  std::optional<CacheGeneration> current(const std::string& cache) const;
  /// Removes replaced generations no overlay backs onto; `in_use` says which do.
  void remove_unused(const std::function<bool(const std::string& path)>& in_use);

  std::vector<CacheState> states() const;
  /// Marks `cache` refreshing; false when a refresh of it is under way already.
  bool begin_refresh(const std::string& cache);
  /// The builder's disks, made fresh under the cache's directory.
  RefreshDisks prepare(const std::string& cache, const std::atomic<bool>& stop);
  /// Checks and compacts the builder's work disk into the next generation and swaps it in; the
  /// one it replaces is retired. Throws ImagePullError; then nothing changed.
  CacheGeneration adopt(const std::string& cache, const RefreshDisks& disks,
                        const std::atomic<bool>& stop);
  /// Waits for the refresh of `cache` under way to end and gives its outcome; nothing when none
  /// is under way or `stop` is set first.
  std::optional<RefreshOutcome> follow_refresh(const std::string& cache,
                                               const std::atomic<bool>& stop);
  /// Ends the refresh begun: its outcome is kept and its disks removed.
  void end_refresh(const std::string& cache, const RefreshDisks& disks, RefreshOutcome outcome);
  /// When the last refresh of `cache` ended (successful or not); nothing when none has.
  std::optional<std::chrono::system_clock::time_point> last_refresh_time(
      const std::string& cache) const;

 private:
  struct Entry {
    const CacheConfig* config = nullptr;
    std::optional<CacheGeneration> current;
    std::string current_made_at;
    RetiredFiles retired;
    bool refreshing = false;
    std::optional<RefreshOutcome> last_refresh;
    std::optional<std::chrono::system_clock::time_point> last_refresh_time;
    std::uint64_t refreshes_ok = 0;
    std::uint64_t refreshes_failed = 0;
  };
  std::filesystem::path directory_of(const std::string& cache) const;
  Entry& entry(const std::string& cache);
  const Entry& entry(const std::string& cache) const;
  void load(Entry& entry);
  void save(const Entry& entry) const;

  std::filesystem::path directory_;
  CacheDiskTools& tools_;
  const Clock& clock_;
  Logger& log_;
  std::chrono::seconds retired_grace_;
  mutable std::mutex mutex_;
  std::condition_variable refresh_ended_;
  std::map<std::string, Entry, std::less<>> entries_;
};

}  // namespace garm_edge::agent
