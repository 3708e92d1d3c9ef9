#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "agent/base/config.hpp"
#include "agent/base/log.hpp"
#include "agent/images/image_digest.hpp"
#include "agent/images/image_fetcher.hpp"
#include "agent/images/image_tools.hpp"
#include "agent/images/pull_room.hpp"
#include "agent/instances/image_bases.hpp"

namespace garm_edge::agent {

struct ImageStoreOptions {
  std::filesystem::path state_dir;  // <state_dir>/images: records, locks, downloads
  std::filesystem::path base_dir;   // where the converted bases go (the pool's directory)
  std::uint64_t bytes_per_second = 0;
  std::chrono::seconds recheck{std::chrono::hours(6)};
  std::chrono::seconds retry_after_failure{std::chrono::minutes(1)};
  /// A replaced base stays at least this long: a create that chose it just before the swap
  /// may still wait for its turn (max_concurrent_creates) before its record names it.
  std::chrono::seconds retired_grace{std::chrono::minutes(15)};
};

/// Pulls every `[[images]]` entry with a `source`: the digest from the config or the source's
/// checksum file, a download that resumes where it stopped (also after a restart), verified
/// before anything uses it, decompressed, checked to read no other file of the host,
/// converted to a read-only qcow2 base and swapped in atomically. One pull per image at a
/// time, in this process or any other (a lock file: the `images` CLI pulls too). A replaced
/// base stays until no overlay backs onto it.
class ImageStore final : public ImageBases {
 public:
  ImageStore(std::vector<ImageConfig> images, ImageStoreOptions options, ImageFetcher& fetcher,
             ImageTools& tools, PullDisk& disk, Logger& log);
  ~ImageStore() override;
  ImageStore(const ImageStore&) = delete;
  ImageStore& operator=(const ImageStore&) = delete;

  /// Starts the pulls due: missing or out-of-date bases, failures past their wait, checksum
  /// files not read for `recheck`. Also picks up what another process pulled. Call it
  /// periodically (the reconcile loop does).
  void tick();
  /// Starts a pull of `image` now, with a fresh look at its checksum file. False when one is
  /// under way already; throws std::invalid_argument for an image the agent does not pull.
  bool pull(const std::string& image) override;
  /// Pulls `image` in the calling thread (the CLI), whatever tick() would say. `progress` is
  /// called as bytes arrive. Throws ImagePullError.
  ImagePullState pull_now(const std::string& image,
                          const std::function<void(const ImagePullState&)>& progress);
  /// Starts a pull of `image` as pull() does, or follows the one under way, and waits for its
  /// end; `progress` is called every `interval` meanwhile (the running agent's `images pull`).
  /// Throws ImagePullError with why it failed.
  ImagePullState follow_pull(const std::string& image,
                             const std::function<void(const ImagePullState&)>& progress,
                             std::chrono::milliseconds interval = std::chrono::milliseconds(500));
  /// Ends the pulls under way (their downloads are kept to resume) and waits for them.
  void stop();

  bool pulls(const std::string& image) const override;
  std::optional<ImageBase> ready(const std::string& image) const override;
  std::optional<ImagePullState> state(const std::string& image) const override;
  std::vector<ImagePullState> states() const override;
  void remove_unused(const std::function<bool(const std::string& path)>& in_use) override;

  /// Prometheus text: bytes pulled, pulls by outcome, per-image state.
  std::string render_metrics() const;

  /// Removes `image`'s base (and replaced ones) when nothing backs onto them. Returns what
  /// was removed; throws ImagePullError naming a base still in use.
  std::vector<std::string> remove(const std::string& image,
                                  const std::function<bool(const std::string& path)>& in_use);

 private:
  struct Entry;

  Entry& entry(const std::string& image);
  const Entry& entry(const std::string& image) const;
  void start_pull(Entry& entry);
  /// `caller_waits`: the images CLI, told when another process holds the pull.
  void run_pull(Entry& entry, bool caller_waits);
  /// The pull itself, the image's lock held: the digest, the download, the base.
  void pull_under_lock(Entry& entry);
  void fail_pull(Entry& entry, const std::string& why);
  /// Keeps why the pull failed in its record, for `images list` in another process (mutex_ held).
  void record_failure(Entry& entry);
  ImageDigest expected_digest(Entry& entry);
  std::filesystem::path download(Entry& entry, const ImageDigest& expected);
  /// Calls the progress callback of the CLI's pull, if any.
  void report_progress(const Entry& entry) const;
  /// "downloaded and hashed 400 MiB in 0.52 s, 770 MiB/s": the figure an operator compares
  /// with the link (and bench/images.sh with curl's).
  void log_download_rate(const Entry& entry, std::uint64_t bytes,
                         std::chrono::steady_clock::duration took) const;
  std::filesystem::path convert(Entry& entry, const std::filesystem::path& downloaded,
                                const ImageDigest& digest);
  void adopt(Entry& entry, const std::filesystem::path& base, const ImageDigest& digest);
  void reload_record(Entry& entry);
  void save_record(const Entry& entry);
  std::filesystem::path record_path(const std::string& image) const;
  std::filesystem::path lock_path(const std::string& image) const;
  std::filesystem::path downloads_dir() const;
  /// Removes the download files (parts, unpacked images) whose names `unwanted` picks.
  void remove_partials(const std::function<bool(const std::string& file)>& unwanted);

  ImageStoreOptions options_;
  ImageFetcher& fetcher_;
  ImageTools& tools_;
  Logger& log_;
  std::atomic<bool> stopping_{false};
  std::atomic<std::uint64_t> bytes_downloaded_{0};
  std::atomic<std::uint64_t> pulls_verified_{0};
  std::atomic<std::uint64_t> pulls_failed_{0};
  mutable std::mutex mutex_;
  std::map<std::string, std::unique_ptr<Entry>> entries_;
  PullRoom room_;
};

}  // namespace garm_edge::agent
