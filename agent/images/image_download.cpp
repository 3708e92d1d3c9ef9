#include "agent/images/image_download.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>
#include <unistd.h>
#include <vector>

#include "agent/images/image_files.hpp"
#include "common/text.hpp"

namespace garm_edge::agent {
namespace {

/// How often the room is looked at again, and the progress reported.
constexpr std::uint64_t kRoomCheckEvery = 8 << 20;

}  // namespace

void hash_prefix(int fd, std::uint64_t length, StreamingDigest& digest) {
  std::vector<char> buffer(1 << 20);
  for (std::uint64_t done = 0; done < length;) {
    const auto want =
        static_cast<std::size_t>(std::min<std::uint64_t>(buffer.size(), length - done));
    const auto got = ::pread(fd, buffer.data(), want, static_cast<off_t>(done));
    if (got <= 0) {
      throw ImagePullError("reading the kept part of the download: " + errno_text());
    }
    digest.update({buffer.data(), static_cast<std::size_t>(got)});
    done += static_cast<std::uint64_t>(got);
  }
}

ImageDownload::ImageDownload(std::filesystem::path part, int fd, ImageDigest::Algorithm algorithm,
                             DownloadMeter meter, DownloadLimits limits)
    : part_(std::move(part)),
      fd_(fd),
      algorithm_(algorithm),
      meter_(std::move(meter)),
      limits_(std::move(limits)),
      digest_(std::make_unique<StreamingDigest>(algorithm)) {}

void ImageDownload::begin(std::uint64_t from, std::optional<std::uint64_t> total) {
  pending_.clear();
  wait_for_hash();
  if (from == 0) {
    if (::ftruncate(fd_, 0) != 0) {
      throw ImagePullError("starting the download over: " + errno_text());
    }
    digest_ = std::make_unique<StreamingDigest>(algorithm_);
  } else {
    hash_prefix(fd_, from, *digest_);
  }
  written_ = from;
  room_checked_at_ = from;
  meter_.bytes = from;
  meter_.total = total.value_or(0);
  started_ = Clock::now();
  started_bytes_ = from;
  hold_.reset();
  if (total) {  // what the server announces is held for it, and checked against the room
    hold_ = limits_.room.hold(limits_.directory, part_, *total, "the image");
  }
  allowance_ = limits_.room.left(limits_.directory, hold_.get());
}

void ImageDownload::take(std::string_view piece) {
  if (limits_.stopping) {
    throw ImagePullError(
        "the pull was stopped (the agent stops, or Ctrl-C): what arrived is kept to resume");
  }
  if (piece.size() > allowance_ || written_ - room_checked_at_ >= kRoomCheckEvery) {
    // Other pulls share the disk: what was free at the start may be taken by now.
    room_checked_at_ = written_;
    allowance_ = limits_.room.left(limits_.directory, hold_.get());
    if (piece.size() > allowance_) {
      throw ImagePullError("no room for the image: the disk (or [pull] quota_gib) is full after " +
                           mib(written_));
    }
  }
  if (meter_.total > 0 && written_ + piece.size() > meter_.total) {
    throw ImagePullError("the server sent more than the " + mib(meter_.total) + " it announced");
  }
  pending_.append(piece);
  written_ += piece.size();
  if (pending_.size() >= kWriteSize) {
    flush();
  }
  meter_.downloaded += piece.size();
  allowance_ -= std::min<std::uint64_t>(allowance_, piece.size());
  meter_.bytes = written_;
  report_progress();
  keep_to_rate();
}

ImageDownload::~ImageDownload() {
  try {
    write_pending();                 // what arrived is kept for the next pull to resume from
  } catch (const std::exception&) {  // nothing more to keep then
  }
  wait_for_hash();
}

ImageDigest ImageDownload::finish() {
  flush();
  wait_for_hash();
  return digest_->finish();
}

void ImageDownload::report_progress() {
  if (meter_.report && (written_ - reported_ >= kRoomCheckEvery || written_ == meter_.total)) {
    reported_ = written_;
    meter_.report();
  }
}

void ImageDownload::keep_to_rate() {
  const auto rate = limits_.bytes_per_second;
  if (rate == 0) {
    return;
  }
  const auto due =
      started_ + std::chrono::microseconds((written_ - started_bytes_) * 1'000'000 / rate);
  while (Clock::now() < due && !limits_.stopping) {
    std::this_thread::sleep_for(
        std::min<Clock::duration>(due - Clock::now(), std::chrono::milliseconds(100)));
  }
}

void ImageDownload::flush() {
  if (pending_.empty()) {
    return;
  }
  write_pending();
  wait_for_hash();
  std::swap(hashing_, written_block_);
  hashed_ = std::async(std::launch::async, [this] { digest_->update(hashing_); });
}

void ImageDownload::wait_for_hash() {
  if (hashed_.valid()) {
    hashed_.get();
  }
}

void ImageDownload::write_pending() {
  if (pending_.empty()) {
    return;
  }
  const auto at = written_ - pending_.size();
  const bool written = ::pwrite(fd_, pending_.data(), pending_.size(), static_cast<off_t>(at)) ==
                       static_cast<ssize_t>(pending_.size());
  const int error = errno;
  written_block_.swap(pending_);
  pending_.clear();
  if (!written) {
    throw ImagePullError(error == ENOSPC || error == EDQUOT
                             ? "no room for the image: the disk is full after " + mib(at)
                             : "writing the download: " + std::string(std::strerror(error)));
  }
}

}  // namespace garm_edge::agent
