#include "agent/runner_archives/archive_cache.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <set>
#include <sys/stat.h>
#include <system_error>
#include <thread>
#include <unistd.h>

#include "agent/runner_archives/archive_shelf.hpp"
#include "common/prometheus_text.hpp"
#include "common/text.hpp"
#include "net/secret_token.hpp"

namespace garm_edge::agent {
namespace {

namespace fs = std::filesystem;

/// Downloads at once; further ones wait in line. One controller's downloads take at most half,
/// and never the last free thread once it has one, so its slow or stalled URLs (or two
/// controllers') leave the other controllers room.
constexpr std::size_t kMaxDownloads = 4;
constexpr std::size_t kMaxDownloadsPerController = kMaxDownloads / 2;

/// Downloads and failures are per source: a controller naming another's SHA-256 with its own
/// URL, token, CA or proxy neither joins the other's download nor sees its failure.
std::string source_key(const ArchiveSource& source) {
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
        log(logger),
        shelf(options.directory, options.max_bytes, time, logger) {}

  struct Failure {
    std::chrono::system_clock::time_point at;
    std::string reason;
  };
  /// A download queued or under way: who waits for it, which instances it is for, the
  /// controller whose share it takes, and its stop switch, thrown when nobody wants it any more.
  struct Download {
    ArchiveSource source;
    std::vector<Ready> waiting;
    std::set<std::string> owners;
    std::string controller;
    std::shared_ptr<std::atomic<bool>> cancel = std::make_shared<std::atomic<bool>>(false);
    std::uint64_t id = 0;  // queue order; a cancelled download's thread must not take its
                           // successor's place
    bool started = false;
  };

  const ArchiveCacheOptions options;
  const std::shared_ptr<ArchiveFetcher> fetcher;
  const Clock& clock;
  Logger& log;
  std::atomic<bool> stopping{false};

  mutable std::mutex mutex;
  ArchiveShelf shelf;                         // the archives on disk
  std::map<std::string, Download> downloads;  // queued or under way, by source_key
  std::uint64_t next_download = 1;
  /// Download threads still running, cancelled ones included (they end within moments): what
  /// kMaxDownloads bounds, in all and per controller.
  std::size_t threads_running = 0;
  std::map<std::string, std::size_t> threads_per_controller;
  std::map<std::string, Failure> failures;  // recent ones, by source_key
  std::size_t callbacks_running = 0;        // waiters being called outside the lock
  std::condition_variable callbacks_done;
  Stats stats;

  /// Under the lock: the failure of `source` still remembered, if any. A clock that stepped
  /// back ends the memory rather than stretching it.
  const Failure* recent_failure(const ArchiveSource& source) {
    const auto failed = failures.find(source_key(source));
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
    if (auto file = shelf.open(source.sha256)) {
      ++stats.hits;
      return Outcome{.file = std::move(file), .error = ""};
    }
    if (const auto* failed = recent_failure(source)) {
      ++stats.failed_requests;
      return Outcome{.file = nullptr, .error = failed->reason};
    }
    return std::nullopt;
  }

  /// Downloads into a part file; returns the verified size or throws. `written` counts the
  /// bytes added to the shelf's part bytes.
  std::uint64_t download(const ArchiveSource& source, const fs::path& part,
                         const std::atomic<bool>& cancel, std::uint64_t& written) {
    UniqueFd fd(::open(part.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
    if (fd.get() < 0) {
      throw ArchiveError("cannot create " + part.string() + ": " + errno_text());
    }
    const WriteBudget budget{.could_fit =
                                 [this](std::uint64_t size) {
                                   std::lock_guard lock(mutex);
                                   return !stopping && shelf.could_fit_part(size);
                                 },
                             .may_write =
                                 [this, &written](std::uint64_t more) {
                                   std::lock_guard lock(mutex);
                                   // The owner (and its logger) may be gone once stopping.
                                   if (stopping || !shelf.make_room(more)) {
                                     return false;
                                   }
                                   shelf.add_part_bytes(more);
                                   written += more;
                                   return true;
                                 }};
    const auto fetched = fetcher->fetch(source, fd.get(), budget, cancel);
    if (fetched.sha256 != source.sha256) {
      throw ArchiveError("the download's SHA-256 is " + fetched.sha256 +
                         ", garm's bootstrap says " + source.sha256);
    }
    if (::fsync(fd.get()) != 0) {
      throw ArchiveError("syncing the archive to disk: " + errno_text());
    }
    return fetched.size;
  }

  static void run_download(const std::shared_ptr<State>& self, const ArchiveSource& source,
                           const std::shared_ptr<std::atomic<bool>>& cancel, std::uint64_t id,
                           const std::string& controller) {
    self->finish_download(source, *cancel, id, controller);
    std::lock_guard lock(self->mutex);
    self->start_queued(self);  // its thread's place goes to the next download in line
  }

  void finish_download(const ArchiveSource& source, const std::atomic<bool>& cancel,
                       std::uint64_t id, const std::string& controller) {
    const auto part = shelf.part_path(source.sha256);
    std::uint64_t size = 0;
    std::uint64_t written = 0;
    std::string error;
    bool on_disk = false;  // another source's download of the same bytes ended while it queued
    {
      std::lock_guard lock(mutex);
      on_disk = shelf.contains(source.sha256);
    }
    try {
      if (!on_disk) {
        size = download(source, part, cancel, written);
      }
    } catch (const std::exception& e) {
      error = e.what();
    }
    std::vector<Ready> waiting;
    Outcome outcome;
    {
      std::lock_guard lock(mutex);
      --threads_running;
      if (--threads_per_controller[controller] == 0) {
        threads_per_controller.erase(controller);
      }
      shelf.remove_part_bytes(written);
      const auto key = source_key(source);
      if (const auto mine = downloads.find(key); mine != downloads.end() && mine->second.id == id) {
        waiting = std::move(mine->second.waiting);
        downloads.erase(mine);
      }
      if (stopping || (cancel && waiting.empty())) {
        if (cancel && !stopping) {
          ++stats.cancelled;
        }
        std::error_code ignored;
        fs::remove(part, ignored);
        return;
      }
      if (on_disk) {
        outcome.file = shelf.open(source.sha256);
        if (!outcome.file) {
          error = "the archive vanished from the cache";
        }
      } else if (error.empty()) {
        error = shelf.keep(part, source.sha256, size);
        if (error.empty()) {
          ++stats.downloads;
          stats.bytes_downloaded += size;
          log.info("runner archive cache: downloaded and verified " + source.sha256 + " (" +
                   std::to_string(size) + " bytes)");
          outcome.file = shelf.open(source.sha256);
        }
      }
      if (!error.empty()) {
        std::error_code ignored;
        fs::remove(part, ignored);
        failures[source_key(source)] = {.at = clock.now(), .reason = error};
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

  /// Under the lock: registers `ready` (may be empty) and `owner` (may be empty) with the
  /// source's download, queueing one for `controller` if there is none, and starts what may.
  void join_download(const std::shared_ptr<State>& self, const ArchiveSource& source, Ready& ready,
                     const std::string& owner, const std::string& controller) {
    const auto key = source_key(source);
    auto found = downloads.find(key);
    if (found != downloads.end() && *found->second.cancel) {
      downloads.erase(found);  // stopping already: a new one takes its place
      found = downloads.end();
    }
    if (found == downloads.end()) {
      Download queued{.source = source,
                      .waiting = {},
                      .owners = {},
                      .controller = controller,
                      .cancel = std::make_shared<std::atomic<bool>>(false),
                      .id = next_download++,
                      .started = false};
      found = downloads.emplace(key, std::move(queued)).first;
    }
    if (ready) {
      found->second.waiting.push_back(std::move(ready));
    }
    if (!owner.empty()) {
      found->second.owners.insert(owner);
    }
    start_queued(self);
  }

  /// Under the lock: starts queued downloads while threads are free in all and in their
  /// controller's share. One whose thread cannot be started stays queued.
  void start_queued(const std::shared_ptr<State>& self) {
    while (threads_running < kMaxDownloads && !stopping) {
      // The controller running fewest first, then the oldest; a controller with a download
      // running never takes the last free thread.
      auto next = downloads.end();
      const auto fewer = [this](const Download& a, const Download& b) {
        const auto ta = threads_of(a.controller);
        const auto tb = threads_of(b.controller);
        return ta != tb ? ta < tb : a.id < b.id;
      };
      for (auto it = downloads.begin(); it != downloads.end(); ++it) {
        const auto& download = it->second;
        const auto running = threads_of(download.controller);
        const bool takes_the_last = threads_running + 1 >= kMaxDownloads && running > 0;
        if (!download.started && running < kMaxDownloadsPerController && !takes_the_last &&
            (next == downloads.end() || fewer(download, next->second))) {
          next = it;
        }
      }
      if (next == downloads.end()) {
        return;
      }
      auto& download = next->second;
      try {
        std::thread([self, source = download.source, cancel = download.cancel, id = download.id,
                     controller = download.controller] {
          run_download(self, source, cancel, id, controller);
        }).detach();
      } catch (const std::system_error& e) {
        log.warning(std::string("runner archive cache: cannot start a download: ") + e.what());
        return;
      }
      download.started = true;
      ++threads_running;
      ++threads_per_controller[download.controller];
    }
  }

  std::size_t threads_of(const std::string& controller) const {
    const auto found = threads_per_controller.find(controller);
    return found == threads_per_controller.end() ? 0 : found->second;
  }

  /// Under the lock: `owner` no longer wants its downloads; one nobody wants stops, or leaves
  /// the queue.
  void release(const std::string& owner) {
    for (auto it = downloads.begin(); it != downloads.end();) {
      auto& download = it->second;
      download.owners.erase(owner);
      if (!download.owners.empty() || !download.waiting.empty()) {
        ++it;
      } else if (download.started) {
        *download.cancel = true;
        ++it;
      } else {
        it = downloads.erase(it);
      }
    }
  }
};

RunnerArchiveCache::RunnerArchiveCache(ArchiveCacheOptions options,
                                       std::shared_ptr<ArchiveFetcher> fetcher, const Clock& clock,
                                       Logger& log)
    : state_(std::make_shared<State>(std::move(options), std::move(fetcher), clock, log)) {
  try {
    state_->shelf.scan();
  } catch (const fs::filesystem_error& e) {
    throw std::runtime_error("runner archive cache " + state_->options.directory.string() + ": " +
                             e.what());
  }
}

RunnerArchiveCache::~RunnerArchiveCache() {
  std::map<std::string, std::vector<Ready>> dropped;
  std::unique_lock lock(state_->mutex);
  state_->stopping = true;
  for (auto& [key, download] : state_->downloads) {
    *download.cancel = true;
    dropped[key].swap(download.waiting);  // destroyed when this returns, on the owner's thread
  }
  // Waiters already being called finish before the owner's objects go.
  state_->callbacks_done.wait(lock, [&] { return state_->callbacks_running == 0; });
}

void RunnerArchiveCache::prefetch(const ArchiveSource& source, const std::string& owner,
                                  const std::string& controller) {
  std::lock_guard lock(state_->mutex);
  if (state_->shelf.contains(source.sha256) || state_->recent_failure(source) != nullptr) {
    return;
  }
  Ready none;
  state_->join_download(state_, source, none, owner, controller);
}

void RunnerArchiveCache::fetch(const ArchiveSource& source, const std::string& controller,
                               Ready ready) {
  std::optional<Outcome> now;
  {
    std::lock_guard lock(state_->mutex);
    now = state_->answer_now(source);
    if (!now) {
      state_->join_download(state_, source, ready, "", controller);
      return;
    }
  }
  ready(std::move(*now));
}

void RunnerArchiveCache::release(const std::string& owner) {
  std::lock_guard lock(state_->mutex);
  state_->release(owner);
}

std::size_t RunnerArchiveCache::downloads_under_way() const {
  std::lock_guard lock(state_->mutex);
  return state_->threads_running;
}

std::size_t RunnerArchiveCache::downloads_queued() const {
  std::lock_guard lock(state_->mutex);
  return static_cast<std::size_t>(std::count_if(state_->downloads.begin(), state_->downloads.end(),
                                                [](const auto& d) { return !d.second.started; }));
}

RunnerArchiveCache::Stats RunnerArchiveCache::stats() const {
  std::lock_guard lock(state_->mutex);
  auto stats = state_->stats;
  stats.archives = state_->shelf.archives();
  stats.bytes = state_->shelf.bytes();
  stats.part_bytes = state_->shelf.part_bytes();
  stats.evictions = state_->shelf.evictions();
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
  text.sample("garm_edge_runner_archive_downloads_total", {{"outcome", "cancelled"}},
              now.cancelled);
  text.family("garm_edge_runner_archive_downloaded_bytes_total", "counter",
              "Bytes of runner archives downloaded from outside the host.");
  text.sample("garm_edge_runner_archive_downloaded_bytes_total", {}, now.bytes_downloaded);
  text.family("garm_edge_runner_archive_evictions_total", "counter",
              "Archives removed to stay within the cache's size.");
  text.sample("garm_edge_runner_archive_evictions_total", {}, now.evictions);
  text.family("garm_edge_runner_archive_cache_bytes", "gauge", "Bytes of archives on disk.");
  text.sample("garm_edge_runner_archive_cache_bytes", {}, now.bytes);
  text.family("garm_edge_runner_archive_part_bytes", "gauge",
              "Bytes of downloads under way, counted against the cache's size.");
  text.sample("garm_edge_runner_archive_part_bytes", {}, now.part_bytes);
  text.family("garm_edge_runner_archive_cache_archives", "gauge", "Archives on disk.");
  text.sample("garm_edge_runner_archive_cache_archives", {}, now.archives);
  return text.str();
}

}  // namespace garm_edge::agent
