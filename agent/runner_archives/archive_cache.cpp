#include "agent/runner_archives/archive_cache.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <system_error>
#include <thread>
#include <unistd.h>

#include "agent/base/prometheus_text.hpp"
#include "net/secret_token.hpp"

namespace garm_edge::agent {
namespace {

namespace fs = std::filesystem;

bool is_sha256_name(const std::string& name) {
  return name.size() == 64 && std::all_of(name.begin(), name.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

std::string errno_text() {
  return std::strerror(errno);
}

/// Failures are remembered per source: a guest of another pool (its own proxy, token or CA)
/// does not inherit them.
std::string failure_key(const ArchiveSource& source) {
  return source.sha256 + "|" +
         net::sha256_hex(source.url + '\n' + source.bearer_token + '\n' + source.ca_bundle + '\n' +
                         source.proxies.http_proxy + '\n' + source.proxies.https_proxy + '\n' +
                         source.proxies.no_proxy);
}

}  // namespace

struct RunnerArchiveCache::State {
  State(ArchiveCacheOptions cache_options, std::shared_ptr<ArchiveFetcher> archive_fetcher,
        const Clock& time, Logger& logger)
      : options(std::move(cache_options)),
        fetcher(std::move(archive_fetcher)),
        clock(time),
        log(logger) {}

  struct Entry {
    std::uint64_t size = 0;
    std::chrono::system_clock::time_point last_used;
  };
  struct Failure {
    std::chrono::system_clock::time_point at;
    std::string reason;
  };

  const ArchiveCacheOptions options;
  const std::shared_ptr<ArchiveFetcher> fetcher;
  const Clock& clock;
  Logger& log;
  std::atomic<bool> stopping{false};

  mutable std::mutex mutex;
  std::map<std::string, Entry> entries;                 // on disk, by SHA-256
  std::map<std::string, std::vector<Ready>> downloads;  // under way, with their waiters
  std::map<std::string, Failure> failures;              // recent ones, by failure_key
  std::size_t callbacks_running = 0;                    // waiters being called outside the lock
  std::condition_variable callbacks_done;
  Stats stats;

  fs::path path_of(const std::string& sha256) const { return options.directory / sha256; }

  void scan() {
    fs::create_directories(options.directory);
    fs::permissions(options.directory, fs::perms::owner_all, fs::perm_options::replace);
    for (const auto& item : fs::directory_iterator(options.directory)) {
      const auto name = item.path().filename().string();
      if (name.ends_with(".part")) {
        fs::remove(item.path());  // a download the last run did not finish
      } else if (is_sha256_name(name) && item.is_regular_file()) {
        struct stat info {};
        if (::stat(item.path().c_str(), &info) == 0) {
          entries[name] = {.size = static_cast<std::uint64_t>(info.st_size),
                           .last_used = std::chrono::system_clock::from_time_t(info.st_mtime)};
        }
      }
    }
    make_room(0, "");
  }

  /// Evicts least recently used archives until `incoming` more bytes fit; never `keep`.
  void make_room(std::uint64_t incoming, const std::string& keep) {
    while (true) {
      std::uint64_t used = 0;
      for (const auto& [sha, entry] : entries) {
        used += entry.size;
      }
      if (used + incoming <= options.max_bytes) {
        return;
      }
      auto oldest = entries.end();
      for (auto it = entries.begin(); it != entries.end(); ++it) {
        if (it->first != keep &&
            (oldest == entries.end() || it->second.last_used < oldest->second.last_used)) {
          oldest = it;
        }
      }
      if (oldest == entries.end()) {
        return;
      }
      std::error_code ignored;  // a file being served stays readable through its descriptor
      fs::remove(path_of(oldest->first), ignored);
      log.info("runner archive cache: evicted " + oldest->first + " (" +
               std::to_string(oldest->second.size) + " bytes, least recently used)");
      entries.erase(oldest);
      ++stats.evictions;
    }
  }

  /// The archive on disk, opened and marked as just used; null when it is not there.
  std::shared_ptr<net::FileBody> open_cached(const std::string& sha256) {
    const auto it = entries.find(sha256);
    if (it == entries.end()) {
      return nullptr;
    }
    UniqueFd fd(::open(path_of(sha256).c_str(), O_RDONLY | O_CLOEXEC));
    if (fd.get() < 0) {
      log.warning("runner archive cache: " + sha256 + " vanished from disk: " + errno_text());
      entries.erase(it);
      return nullptr;
    }
    it->second.last_used = clock.now();
    ::futimens(fd.get(), nullptr);  // the recency survives a restart
    return std::make_shared<net::FileBody>(
        net::FileBody{.fd = std::move(fd), .size = it->second.size});
  }

  /// Under the lock: the failure of `source` still remembered, if any. A clock that stepped
  /// back ends the memory rather than stretching it.
  const Failure* recent_failure(const ArchiveSource& source) {
    const auto failed = failures.find(failure_key(source));
    if (failed == failures.end()) {
      return nullptr;
    }
    const auto now = clock.now();
    if (now >= failed->second.at && now - failed->second.at < options.failure_memory) {
      return &failed->second;
    }
    failures.erase(failed);
    return nullptr;
  }

  /// Under the lock: an answer that needs no download, if there is one.
  std::optional<Outcome> answer_now(const ArchiveSource& source) {
    if (auto file = open_cached(source.sha256)) {
      ++stats.hits;
      return Outcome{.file = std::move(file), .error = ""};
    }
    if (const auto* failed = recent_failure(source)) {
      ++stats.failed_requests;
      return Outcome{.file = nullptr, .error = failed->reason};
    }
    return std::nullopt;
  }

  /// Downloads into a part file; returns the verified size or throws.
  std::uint64_t download(const ArchiveSource& source, const fs::path& part) {
    UniqueFd fd(::open(part.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
    if (fd.get() < 0) {
      throw ArchiveError("cannot create " + part.string() + ": " + errno_text());
    }
    const auto fetched = fetcher->fetch(source, fd.get(), options.max_bytes, stopping);
    if (fetched.sha256 != source.sha256) {
      throw ArchiveError("the download's SHA-256 is " + fetched.sha256 +
                         ", garm's bootstrap says " + source.sha256);
    }
    if (::fsync(fd.get()) != 0) {
      throw ArchiveError("syncing the archive to disk: " + errno_text());
    }
    return fetched.size;
  }

  void run_download(const ArchiveSource& source) {
    const auto part = options.directory / (source.sha256 + "." + net::random_token() + ".part");
    std::uint64_t size = 0;
    std::string error;
    try {
      size = download(source, part);
    } catch (const std::exception& e) {
      error = e.what();
    }
    std::vector<Ready> waiting;
    Outcome outcome;
    {
      std::lock_guard lock(mutex);
      waiting = std::move(downloads[source.sha256]);
      downloads.erase(source.sha256);
      if (stopping) {
        std::error_code ignored;
        fs::remove(part, ignored);
        return;
      }
      if (error.empty()) {
        make_room(size, source.sha256);
        std::error_code renamed;
        fs::rename(part, path_of(source.sha256), renamed);
        if (renamed) {
          error = "keeping the archive: " + renamed.message();
        } else {
          entries[source.sha256] = {.size = size, .last_used = clock.now()};
          ++stats.downloads;
          stats.bytes_downloaded += size;
          log.info("runner archive cache: downloaded and verified " + source.sha256 + " (" +
                   std::to_string(size) + " bytes)");
          outcome.file = open_cached(source.sha256);
        }
      }
      if (!error.empty()) {
        std::error_code ignored;
        fs::remove(part, ignored);
        failures[failure_key(source)] = {.at = clock.now(), .reason = error};
        ++stats.download_failures;
        stats.failed_requests += waiting.size();
        log.warning("runner archive cache: the download of " + source.sha256 + " failed: " + error);
        outcome.error = error;
      } else {
        stats.waited += waiting.size();
      }
      ++callbacks_running;  // the owner waits for these before it goes
    }
    call_all(std::move(waiting), outcome);
  }

  /// Calls and then destroys every waiter, outside the lock; then lets the owner go.
  void call_all(std::vector<Ready> waiting, const Outcome& outcome) {
    try {
      for (auto& ready : waiting) {
        ready(outcome);
      }
    } catch (...) {
      // A waiter's failure is its own; the others were told, or are dropped below.
    }
    waiting.clear();
    std::lock_guard lock(mutex);
    --callbacks_running;
    callbacks_done.notify_all();
  }

  /// Under the lock: registers `ready` (may be empty) with the archive's download, starting one
  /// if none is under way. Throws (changing nothing) when no thread can be started.
  void join_download(const std::shared_ptr<State>& self, const ArchiveSource& source,
                     Ready& ready) {
    if (!downloads.contains(source.sha256)) {
      std::thread([self, source] { self->run_download(source); }).detach();
      downloads[source.sha256];  // the thread waits for the lock before it looks
    }
    if (ready) {
      downloads[source.sha256].push_back(std::move(ready));
    }
  }
};

RunnerArchiveCache::RunnerArchiveCache(ArchiveCacheOptions options,
                                       std::shared_ptr<ArchiveFetcher> fetcher, const Clock& clock,
                                       Logger& log)
    : state_(std::make_shared<State>(std::move(options), std::move(fetcher), clock, log)) {
  try {
    state_->scan();
  } catch (const fs::filesystem_error& e) {
    throw std::runtime_error("runner archive cache " + state_->options.directory.string() + ": " +
                             e.what());
  }
}

RunnerArchiveCache::~RunnerArchiveCache() {
  std::map<std::string, std::vector<Ready>> dropped;
  std::unique_lock lock(state_->mutex);
  state_->stopping = true;
  for (auto& [sha256, waiting] : state_->downloads) {
    dropped[sha256].swap(waiting);  // destroyed when this returns, on the owner's thread
  }
  // Waiters already being called finish before the owner's objects go.
  state_->callbacks_done.wait(lock, [&] { return state_->callbacks_running == 0; });
}

void RunnerArchiveCache::prefetch(const ArchiveSource& source) {
  std::lock_guard lock(state_->mutex);
  if (state_->entries.contains(source.sha256) || state_->downloads.contains(source.sha256) ||
      state_->recent_failure(source) != nullptr) {
    return;
  }
  Ready none;
  try {
    state_->join_download(state_, source, none);
  } catch (const std::system_error& e) {
    state_->log.warning(std::string("runner archive cache: cannot start a download: ") + e.what());
  }
}

void RunnerArchiveCache::fetch(const ArchiveSource& source, Ready ready) {
  std::optional<Outcome> now;
  {
    std::lock_guard lock(state_->mutex);
    now = state_->answer_now(source);
    if (!now) {
      try {
        state_->join_download(state_, source, ready);
        return;
      } catch (const std::system_error& e) {
        now =
            Outcome{.file = nullptr, .error = std::string("cannot start a download: ") + e.what()};
      }
    }
  }
  ready(std::move(*now));
}

RunnerArchiveCache::Stats RunnerArchiveCache::stats() const {
  std::lock_guard lock(state_->mutex);
  auto stats = state_->stats;
  stats.archives = state_->entries.size();
  for (const auto& [sha, entry] : state_->entries) {
    stats.bytes += entry.size;
  }
  return stats;
}

std::string RunnerArchiveCache::render_metrics() const {
  const auto now = stats();
  PrometheusText text;
  text.family("garm_edge_runner_archive_requests_total", "counter",
              "Requests for a runner archive: served from disk, served after waiting for its "
              "download, or failed.");
  text.sample("garm_edge_runner_archive_requests_total", {{"outcome", "hit"}}, now.hits);
  text.sample("garm_edge_runner_archive_requests_total", {{"outcome", "waited"}}, now.waited);
  text.sample("garm_edge_runner_archive_requests_total", {{"outcome", "failed"}},
              now.failed_requests);
  text.family("garm_edge_runner_archive_downloads_total", "counter",
              "Runner archive downloads from outside the host, by outcome.");
  text.sample("garm_edge_runner_archive_downloads_total", {{"outcome", "verified"}}, now.downloads);
  text.sample("garm_edge_runner_archive_downloads_total", {{"outcome", "failed"}},
              now.download_failures);
  text.family("garm_edge_runner_archive_downloaded_bytes_total", "counter",
              "Bytes of runner archives downloaded from outside the host.");
  text.sample("garm_edge_runner_archive_downloaded_bytes_total", {}, now.bytes_downloaded);
  text.family("garm_edge_runner_archive_evictions_total", "counter",
              "Archives removed to stay within the cache's size.");
  text.sample("garm_edge_runner_archive_evictions_total", {}, now.evictions);
  text.family("garm_edge_runner_archive_cache_bytes", "gauge", "Bytes of archives on disk.");
  text.sample("garm_edge_runner_archive_cache_bytes", {}, now.bytes);
  text.family("garm_edge_runner_archive_cache_archives", "gauge", "Archives on disk.");
  text.sample("garm_edge_runner_archive_cache_archives", {}, now.archives);
  return text.str();
}

}  // namespace garm_edge::agent
