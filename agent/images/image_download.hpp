#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "agent/images/image_digest.hpp"
#include "agent/images/image_fetcher.hpp"
#include "agent/images/pull_room.hpp"

namespace garm_edge::agent {

/// Where a download's figures go: the pull's own progress and the store's counter.
struct DownloadMeter {
  std::atomic<std::uint64_t>& bytes;       // this pull's, on disk
  std::atomic<std::uint64_t>& total;       // announced by the server; 0 while unknown
  std::atomic<std::uint64_t>& downloaded;  // every pull's, for the metrics
  std::function<void()> report;            // every 8 MiB and at the end
};

/// What a download may take: the disk's room (shared with the other pulls), the configured
/// rate, and the moment the agent stops.
struct DownloadLimits {
  PullRoom& room;
  std::filesystem::path directory;  // where the part file is, for its room
  std::uint64_t bytes_per_second = 0;
  const std::atomic<bool>& stopping;
};

/// The digest of a file's first `length` bytes (the kept part of a download).
void hash_prefix(int fd, std::uint64_t length, StreamingDigest& digest);

/// A download's bytes: into the part file, the digest and the progress, within the disk's
/// room and the configured rate. What arrived stays in the part file, for the next pull to
/// resume from.
class ImageDownload final : public ImageSink {
 public:
  ImageDownload(std::filesystem::path part, int fd, ImageDigest::Algorithm algorithm,
                DownloadMeter meter, DownloadLimits limits);
  ~ImageDownload() override;
  ImageDownload(const ImageDownload&) = delete;
  ImageDownload& operator=(const ImageDownload&) = delete;

  void begin(std::uint64_t from, std::optional<std::uint64_t> total) override;
  void take(std::string_view piece) override;
  /// The digest of every byte of the part file.
  ImageDigest finish();

 private:
  using Clock = std::chrono::steady_clock;
  void report_progress();
  void keep_to_rate();
  /// Writes the pending block, then hashes it on a thread of its own while the next block
  /// arrives: on a fast link the digest no longer adds to the download's time.
  void flush();
  void wait_for_hash();
  /// Writes what is pending at the end of what is on disk; it moves to written_block_.
  void write_pending();

  /// Pieces are written 512 KiB at a time: a read from libcurl is up to 128 KiB.
  static constexpr std::size_t kWriteSize = 512 << 10;

  std::filesystem::path part_;
  int fd_;
  ImageDigest::Algorithm algorithm_;
  DownloadMeter meter_;
  DownloadLimits limits_;
  std::string pending_;        // arrived, not written yet
  std::string written_block_;  // written, not hashed yet
  std::string hashing_;        // a thread hashes it now: untouched here until hashed_ is done
  std::future<void> hashed_;
  std::unique_ptr<StreamingDigest> digest_;
  std::uint64_t written_ = 0;
  std::uint64_t reported_ = 0;
  std::uint64_t allowance_ = 0;
  std::uint64_t room_checked_at_ = 0;
  Clock::time_point started_;
  std::uint64_t started_bytes_ = 0;
  std::unique_ptr<PullRoom::Hold> hold_;  // the announced size, less what is on disk already
};

}  // namespace garm_edge::agent
