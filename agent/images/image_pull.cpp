#include <cstdio>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/images/image_download.hpp"
#include "agent/images/image_files.hpp"
#include "agent/images/image_store_entry.hpp"
#include "common/durable_file.hpp"
#include "common/unix_time.hpp"

// One pull of an image, its lock held: the digest it must have, the download that resumes,
// the checks and the conversion to a read-only base, and the swap.
#include "common/text.hpp"

namespace garm_edge::agent {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

constexpr std::size_t kChecksumFileLimit = 1 << 20;

}  // namespace

void ImageStore::record_failure(Entry& entry) {
  entry.failure = entry.error;
  try {
    save_record(entry);
  } catch (const std::exception& e) {  // the disk may be why it failed: the log has the cause
    log_.warning("image " + entry.config.name + ": cannot record the failure: " + e.what());
  }
}

void ImageStore::run_pull(Entry& entry, bool caller_waits) {
  const auto& name = entry.config.name;
  try {
    const PullLock lock(lock_path(name));
    if (!lock.held()) {
      // The images CLI pulls it: its record tells the next tick how it went.
      if (caller_waits) {
        throw ImagePullError("another process is pulling image " + name + " now");
      }
      std::lock_guard guard(mutex_);
      entry.running = false;
      return;
    }
    try {
      pull_under_lock(entry);
    } catch (const std::exception& e) {
      fail_pull(entry, e.what());
      if (!stopping_) {
        std::lock_guard guard(mutex_);
        record_failure(entry);  // while the lock is held: the record is this pull's to write
      }
    }
  } catch (const std::exception& e) {
    fail_pull(entry, e.what());
  }
  std::lock_guard guard(mutex_);
  entry.running = false;
  entry.progress = nullptr;
}

void ImageStore::pull_under_lock(Entry& entry) {
  const auto& name = entry.config.name;
  {
    std::lock_guard guard(mutex_);
    reload_record(entry);
  }
  const auto expected = expected_digest(entry);
  const bool have = entry.digest == expected.text() && entry.source_url == entry.source().url &&
                    !entry.base.empty() && fs::exists(entry.base);
  if (!have) {
    {
      std::lock_guard guard(mutex_);
      entry.phase = ImagePullState::Phase::pulling;  // an older base, if any, still serves
    }
    log_.info("image " + name + ": pulling " + shown_url(entry.source().url) + " (" +
              expected.text() + ")");
    const auto downloaded = download(entry, expected);
    const auto base = convert(entry, downloaded, expected);
    {
      std::lock_guard guard(mutex_);
      entry.failure.clear();  // adopt() saves the record
    }
    adopt(entry, base, expected);
  }
  std::lock_guard guard(mutex_);
  if (!entry.failure.empty()) {
    entry.failure.clear();
    save_record(entry);
  }
  entry.phase = ImagePullState::Phase::ready;
  entry.error.clear();
  entry.failed_at.reset();
}

void ImageStore::fail_pull(Entry& entry, const std::string& why) {
  std::lock_guard guard(mutex_);
  entry.phase = ImagePullState::Phase::failed;
  entry.error = why;
  entry.failed_at = Clock::now();
  ++pulls_failed_;
  log_.warning("image " + entry.config.name + ": the pull failed: " + why);
}

ImageDigest ImageStore::expected_digest(Entry& entry) {
  const auto& source = entry.source();
  if (!source.sha256.empty()) {
    return {.algorithm = ImageDigest::Algorithm::sha256, .hex = source.sha256};
  }
  std::string text;
  try {
    text = fetcher_.fetch_text(source.checksums_url, kChecksumFileLimit, stopping_);
  } catch (const std::exception& e) {
    throw ImagePullError("the checksum file " + shown_url(source.checksums_url) + ": " + e.what());
  }
  {
    std::lock_guard guard(mutex_);
    entry.checked_at = Clock::now();
  }
  auto digest = digest_in_checksum_file(text, source.file_name());
  if (!digest) {
    throw ImagePullError("the checksum file " + shown_url(source.checksums_url) +
                         " does not list " + source.file_name());
  }
  return *digest;
}

void ImageStore::report_progress(const Entry& entry) const {
  if (entry.progress) {
    entry.progress(*state(entry.config.name));
  }
}

void ImageStore::log_download_rate(const Entry& entry, std::uint64_t bytes,
                                   Clock::duration took) const {
  const auto seconds = std::chrono::duration<double>(took).count();
  char rate[64];
  std::snprintf(rate, sizeof rate, "%.2f s, %.0f MiB/s", seconds,
                seconds > 0 ? static_cast<double>(bytes) / (1 << 20) / seconds : 0.0);
  log_.info("image " + entry.config.name + ": downloaded and hashed " + mib(bytes) + " in " + rate);
}

fs::path ImageStore::download(Entry& entry, const ImageDigest& expected) {
  const auto part = downloads_dir() / (std::string(kImageFilePrefix) + entry.config.name + "-" +
                                       expected.short_hex() + ".part");
  // Another version's partials are no longer wanted.
  remove_partials([&](const std::string& file) {
    return is_image_file_of(file, entry.config.name, {".part", ".unpacked"}) &&
           file != part.filename().string();
  });
  std::error_code ec;
  const UniqueFd fd(::open(part.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
  struct stat facts {};
  if (fd.get() < 0 || ::fstat(fd.get(), &facts) != 0) {
    throw ImagePullError("opening " + part.string() + ": " + errno_text());
  }
  const auto kept = static_cast<std::uint64_t>(facts.st_size);
  if (kept > 0) {
    StreamingDigest digest(expected.algorithm);
    hash_prefix(fd.get(), kept, digest);
    if (digest.finish() == expected) {
      log_.info("image " + entry.config.name + ": the download was complete already");
      entry.bytes = kept;
      entry.total = kept;
      return part;
    }
    log_.info("image " + entry.config.name + ": resuming the download at " + mib(kept));
  }
  ImageDownload sink(part, fd.get(), expected.algorithm,
                     {.bytes = entry.bytes,
                      .total = entry.total,
                      .downloaded = bytes_downloaded_,
                      .report = [this, &entry] { report_progress(entry); }},
                     {.room = room_,
                      .directory = downloads_dir(),
                      .bytes_per_second = options_.bytes_per_second,
                      .stopping = stopping_});
  const auto started = Clock::now();
  try {
    fetcher_.fetch(entry.source().url, kept, sink, stopping_);
  } catch (const std::exception& e) {
    // Refused before its first byte (a 404, a refused redirect) or for room: nothing is left
    // behind. Bytes that did arrive stay, for the retry to resume from.
    struct stat now {};
    const bool empty = ::fstat(fd.get(), &now) == 0 && now.st_size == 0;
    if (empty || std::string_view(e.what()).starts_with("no room")) {
      fs::remove(part, ec);
    }
    throw;
  }
  const auto got = sink.finish();
  if (got != expected) {
    fs::remove(part, ec);
    throw ImagePullError("the download's " + got.text() + " is not the " + expected.text() +
                         " its source names: refused, and removed");
  }
  const std::uint64_t now_on_disk = entry.bytes.load();
  log_download_rate(entry, now_on_disk > kept ? now_on_disk - kept : now_on_disk,
                    Clock::now() - started);
  return part;
}

fs::path ImageStore::convert(Entry& entry, const fs::path& downloaded, const ImageDigest& digest) {
  const auto& source = entry.source();
  const auto stem = std::string(kImageFilePrefix) + entry.config.name + "-" + digest.short_hex();
  const auto unpacked = downloads_dir() / (stem + ".unpacked");
  // This process's own: a qemu-img that outlived another process's pull never writes into it.
  const auto temp = options_.base_dir / ("." + stem + ".qcow2.tmp." + std::to_string(::getpid()));
  const auto final_path = options_.base_dir / (stem + ".qcow2");
  std::error_code ec;
  try {
    auto input = downloaded;
    if (source.xz) {
      const auto size = tools_.unpacked_size(downloaded, stopping_);
      const auto unpacking = room_.hold(downloads_dir(), unpacked, size, "the unpacked image");
      tools_.decompress_xz(downloaded, unpacked, size, stopping_);
      input = unpacked;
    }
    const auto facts = tools_.inspect(input, source.format, stopping_);
    if (!facts.backing_file.empty() || !facts.data_file.empty()) {
      throw ImagePullError("the image names another file (" +
                           (facts.backing_file.empty() ? facts.data_file : facts.backing_file) +
                           "): refused, a guest could read the host's files through it");
    }
    {
      const auto converting =
          room_.hold(options_.base_dir, temp,
                     tools_.converted_size(input, source.format, stopping_), "the converted base");
      tools_.convert_to_qcow2(input, source.format, temp, stopping_);
    }
    publish_file(temp, final_path, 0444);  // read-only: guests' overlays back onto it
  } catch (...) {
    fs::remove(temp, ec);
    fs::remove(unpacked, ec);
    fs::remove(downloaded, ec);  // verified, but refused or not convertible: not kept to retry
    throw;
  }
  fs::remove(unpacked, ec);
  fs::remove(downloaded, ec);
  return final_path;
}

void ImageStore::adopt(Entry& entry, const fs::path& base, const ImageDigest& digest) {
  std::lock_guard guard(mutex_);
  if (!entry.base.empty() && entry.base != base.string()) {
    entry.retired.retire(entry.base, unix_now());
  }
  entry.retired.forget(base.string());
  entry.base = base.string();
  entry.digest = digest.text();
  entry.source_url = entry.source().url;
  save_record(entry);
  ++pulls_verified_;
  log_.info("image " + entry.config.name + ": " + digest.text() + " is ready at " + entry.base);
}

}  // namespace garm_edge::agent
