#include "agent/images/image_store.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <future>
#include <initializer_list>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "agent/base/retired_files.hpp"
#include "common/durable_file.hpp"
#include "common/hex.hpp"
#include "common/prometheus_text.hpp"
#include "common/unique_fd.hpp"
#include "common/unix_time.hpp"

namespace garm_edge::agent {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

constexpr std::size_t kChecksumFileLimit = 1 << 20;
constexpr std::uint64_t kRoomCheckEvery = 8 << 20;
/// Bases and downloads are "garm-image-<image>-<16 hex>…": never an instance overlay's
/// "garm-edge-…" name, which reconcile removes when no record claims it.
constexpr std::string_view kFilePrefix = "garm-image-";

/// "<image>-<16 hex>" followed by one of `suffixes`: a file of that image, not of another image
/// whose name starts the same ("noble" and "noble-arm64").
bool is_file_of(std::string_view file, const std::string& image,
                std::initializer_list<std::string_view> suffixes) {
  const auto stem = std::string(kFilePrefix) + image + "-";
  if (!file.starts_with(stem) || file.size() < stem.size() + 16) {
    return false;
  }
  if (!is_lower_hex(file.substr(stem.size(), 16), 16)) {
    return false;
  }
  const auto rest = file.substr(stem.size() + 16);
  return std::any_of(suffixes.begin(), suffixes.end(),
                     [&](std::string_view suffix) { return rest == suffix; });
}

std::string errno_text() {
  return std::strerror(errno);
}

std::string mib(std::uint64_t bytes) {
  return std::to_string(bytes >> 20U) + " MiB";
}

/// A URL as messages show it: a query may hold a signature or a token, and messages reach
/// every controller through the capacity answer.
std::string shown(const std::string& url) {
  return url.substr(0, url.find_first_of("?#"));
}

/// flock on a file of its own: one pull of an image at a time across processes.
class PullLock {
 public:
  explicit PullLock(const fs::path& path)
      : fd_(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600)) {
    if (fd_.get() < 0) {
      throw ImagePullError("opening " + path.string() + ": " + errno_text());
    }
    held_ = ::flock(fd_.get(), LOCK_EX | LOCK_NB) == 0;
  }
  bool held() const { return held_; }

 private:
  UniqueFd fd_;
  bool held_ = false;
};

/// The digest of a file's first `length` bytes.
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

std::uint64_t bytes_under(const fs::path& directory, std::string_view prefix) {
  std::uint64_t total = 0;
  std::error_code ec;
  for (fs::directory_iterator it(directory, ec), end; !ec && it != end; it.increment(ec)) {
    const auto name = it->path().filename().string();
    if ((name.starts_with(prefix) || name.starts_with("." + std::string(prefix))) &&
        it->is_regular_file(ec)) {
      total += it->file_size(ec);
    }
  }
  return total;
}

}  // namespace

std::uint64_t ImageStore::still_to_write(const HeldRoom& hold) {
  std::error_code ec;
  const auto size = fs::file_size(hold.file, ec);
  if (ec) {
    return hold.bytes;  // nothing written yet
  }
  return size >= hold.bytes ? 0 : hold.bytes - size;
}

std::uint64_t HostPullDisk::room(const fs::path& directory) const {
  struct statvfs facts {};
  if (::statvfs(directory.c_str(), &facts) != 0) {
    throw ImagePullError("the free space of " + directory.string() + ": " + errno_text());
  }
  const auto free = static_cast<std::uint64_t>(facts.f_bavail) * facts.f_frsize;
  if (quota_ == 0) {
    return free;
  }
  std::uint64_t used = 0;
  for (const auto& counted : counted_) {
    used += bytes_under(counted, kFilePrefix);
  }
  return std::min(free, quota_ > used ? quota_ - used : 0);
}

struct ImageStore::Entry {
  ImageConfig config;
  // The record: what is on disk, shared with other processes through the file.
  std::string base;
  std::string digest;
  std::string source_url;
  RetiredFiles retired;
  std::string failure;  // why the last pull failed, in whichever process ran it
  // This process's view of the pull.
  ImagePullState::Phase phase = ImagePullState::Phase::pulling;
  std::atomic<std::uint64_t> bytes{0};
  std::atomic<std::uint64_t> total{0};
  std::string error;
  std::optional<Clock::time_point> checked_at;
  std::optional<Clock::time_point> failed_at;
  std::function<void(const ImagePullState&)> progress;
  bool running = false;
  std::thread worker;

  const ImageSourceConfig& source() const { return *config.source; }
  bool base_matches_config() const {
    return !base.empty() && source_url == source().url &&
           (source().sha256.empty() || digest == "sha256:" + source().sha256);
  }
};

/// A download's bytes: into the part file, the digest and the progress, within the disk's
/// room and the configured rate.
class ImageStore::Download final : public ImageSink {
 public:
  Download(ImageStore& store, Entry& entry, fs::path part, int fd, ImageDigest::Algorithm algorithm)
      : store_(store),
        entry_(entry),
        part_(std::move(part)),
        fd_(fd),
        algorithm_(algorithm),
        digest_(std::make_unique<StreamingDigest>(algorithm)) {}

  void begin(std::uint64_t from, std::optional<std::uint64_t> total) override {
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
    entry_.bytes = from;
    entry_.total = total.value_or(0);
    started_ = Clock::now();
    started_bytes_ = from;
    hold_.reset();
    if (total) {  // what the server announces is held for it, and checked against the room
      hold_ = store_.hold_room(store_.downloads_dir(), part_, *total, "the image");
    }
    allowance_ = store_.room_left(store_.downloads_dir(), hold_.get());
  }

  void take(std::string_view piece) override {
    if (store_.stopping_) {
      throw ImagePullError(
          "the pull was stopped (the agent stops, or Ctrl-C): what arrived is kept to resume");
    }
    if (piece.size() > allowance_ || written_ - room_checked_at_ >= kRoomCheckEvery) {
      // Other pulls share the disk: what was free at the start may be taken by now.
      room_checked_at_ = written_;
      allowance_ = store_.room_left(store_.downloads_dir(), hold_.get());
      if (piece.size() > allowance_) {
        throw ImagePullError(
            "no room for the image: the disk (or [pull] quota_gib) is full after " + mib(written_));
      }
    }
    if (entry_.total > 0 && written_ + piece.size() > entry_.total) {
      throw ImagePullError("the server sent more than the " + mib(entry_.total) + " it announced");
    }
    pending_.append(piece);
    written_ += piece.size();
    if (pending_.size() >= kWriteSize) {
      flush();
    }
    store_.bytes_downloaded_ += piece.size();
    allowance_ -= std::min<std::uint64_t>(allowance_, piece.size());
    entry_.bytes = written_;
    report_progress();
    keep_to_rate();
  }

  ~Download() override {
    try {
      write_pending();                 // what arrived is kept for the next pull to resume from
    } catch (const std::exception&) {  // nothing more to keep then
    }
    wait_for_hash();
  }
  Download(const Download&) = delete;
  Download& operator=(const Download&) = delete;

  ImageDigest finish() {
    flush();
    wait_for_hash();
    return digest_->finish();
  }

 private:
  void report_progress() {
    if (entry_.progress && (written_ - reported_ >= kRoomCheckEvery || written_ == entry_.total)) {
      reported_ = written_;
      entry_.progress(*store_.state(entry_.config.name));
    }
  }
  void keep_to_rate() {
    const auto rate = store_.options_.bytes_per_second;
    if (rate == 0) {
      return;
    }
    const auto due =
        started_ + std::chrono::microseconds((written_ - started_bytes_) * 1'000'000 / rate);
    while (Clock::now() < due && !store_.stopping_) {
      std::this_thread::sleep_for(
          std::min<Clock::duration>(due - Clock::now(), std::chrono::milliseconds(100)));
    }
  }

  /// Writes the pending block, then hashes it on a thread of its own while the next block
  /// arrives: on a fast link the digest no longer adds to the download's time.
  void flush() {
    if (pending_.empty()) {
      return;
    }
    write_pending();
    wait_for_hash();
    std::swap(hashing_, written_block_);
    hashed_ = std::async(std::launch::async, [this] { digest_->update(hashing_); });
  }

  void wait_for_hash() {
    if (hashed_.valid()) {
      hashed_.get();
    }
  }

  /// Writes what is pending at the end of what is on disk; it moves to written_block_.
  void write_pending() {
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

  /// Pieces are written 512 KiB at a time: a read from libcurl is up to 128 KiB.
  static constexpr std::size_t kWriteSize = 512 << 10;

  ImageStore& store_;
  Entry& entry_;
  fs::path part_;
  int fd_;
  std::string pending_;        // arrived, not written yet
  std::string written_block_;  // written, not hashed yet
  std::string hashing_;        // a thread hashes it now: untouched here until hashed_ is done
  std::future<void> hashed_;
  ImageDigest::Algorithm algorithm_;
  std::unique_ptr<StreamingDigest> digest_;
  std::uint64_t written_ = 0;
  std::uint64_t reported_ = 0;
  std::uint64_t allowance_ = 0;
  std::uint64_t room_checked_at_ = 0;
  Clock::time_point started_;
  std::uint64_t started_bytes_ = 0;
  std::unique_ptr<RoomHold> hold_;  // the announced size, less what is on disk already
};

ImageStore::ImageStore(std::vector<ImageConfig> images, ImageStoreOptions options,
                       ImageFetcher& fetcher, ImageTools& tools, PullDisk& disk, Logger& log)
    : options_(std::move(options)), fetcher_(fetcher), tools_(tools), disk_(disk), log_(log) {
  make_private_directory(options_.state_dir / "images");
  make_private_directory(downloads_dir());
  std::error_code ec;
  fs::create_directories(options_.base_dir, ec);
  for (auto& image : images) {
    if (!image.source) {
      continue;
    }
    auto entry = std::make_unique<Entry>();
    entry->config = std::move(image);
    reload_record(*entry);
    entry->phase =
        entry->base.empty() ? ImagePullState::Phase::pulling : ImagePullState::Phase::ready;
    entries_.emplace(entry->config.name, std::move(entry));
  }
  // Partial downloads of images no longer pulled would count against the quota forever.
  remove_partials([this](const std::string& file) {
    return std::none_of(entries_.begin(), entries_.end(), [&](const auto& named) {
      return is_file_of(file, named.first, {".part", ".unpacked"});
    });
  });
}

void ImageStore::remove_partials(const std::function<bool(const std::string& file)>& unwanted) {
  std::error_code ec;
  for (fs::directory_iterator it(downloads_dir(), ec), end; !ec && it != end; it.increment(ec)) {
    const auto file = it->path().filename().string();
    if (file.starts_with(kFilePrefix) && unwanted(file)) {
      std::error_code ignored;
      fs::remove(it->path(), ignored);
    }
  }
}

ImageStore::~ImageStore() {
  stop();
}

void ImageStore::stop() {
  stopping_ = true;
  std::vector<std::thread> workers;
  {
    std::lock_guard lock(mutex_);
    for (auto& [name, entry] : entries_) {
      if (entry->worker.joinable()) {
        workers.push_back(std::move(entry->worker));
      }
    }
  }
  for (auto& worker : workers) {
    worker.join();
  }
}

fs::path ImageStore::record_path(const std::string& image) const {
  return options_.state_dir / "images" / (image + ".json");
}
fs::path ImageStore::lock_path(const std::string& image) const {
  return options_.state_dir / "images" / (image + ".lock");
}
fs::path ImageStore::downloads_dir() const {
  return options_.state_dir / "images" / "downloads";
}

ImageStore::Entry& ImageStore::entry(const std::string& image) {
  const auto found = entries_.find(image);
  if (found == entries_.end()) {
    throw std::invalid_argument("image \"" + image + "\" has no source to pull it from");
  }
  return *found->second;
}
const ImageStore::Entry& ImageStore::entry(const std::string& image) const {
  return const_cast<ImageStore*>(this)->entry(image);
}

void ImageStore::reload_record(Entry& entry) {
  const auto text = read_file(record_path(entry.config.name));
  if (!text) {  // never pulled, or removed by the images CLI: no base either way
    entry.base.clear();
    entry.digest.clear();
    entry.source_url.clear();
    entry.retired = {};
    entry.failure.clear();
    return;
  }
  try {
    const auto record = nlohmann::json::parse(*text);
    entry.base = record.value("base", std::string());
    entry.digest = record.value("digest", std::string());
    entry.source_url = record.value("source", std::string());
    entry.retired.paths = record.value("retired", std::vector<std::string>());
    entry.retired.retired_at = record.value("retired_at", std::map<std::string, std::int64_t>());
    entry.failure = record.value("failure", std::string());
  } catch (const nlohmann::json::exception& e) {
    log_.warning("image " + entry.config.name + ": its record " +
                 record_path(entry.config.name).string() + " is not JSON (" + e.what() +
                 "): pulling the image again");
    entry.base.clear();
  }
}

void ImageStore::save_record(const Entry& entry) {
  const nlohmann::json record{{"source", entry.source_url},
                              {"digest", entry.digest},
                              {"base", entry.base},
                              {"retired", entry.retired.paths},
                              {"retired_at", entry.retired.retired_at},
                              {"failure", entry.failure}};
  write_atomically(record_path(entry.config.name), record.dump(2) + "\n");
}

void ImageStore::tick() {
  std::lock_guard lock(mutex_);
  const auto now = Clock::now();
  for (auto& [name, entry] : entries_) {
    if (entry->running || stopping_) {
      continue;
    }
    reload_record(*entry);  // another process (the images CLI) may have pulled it
    if (entry->base_matches_config() && entry->phase != ImagePullState::Phase::failed) {
      entry->phase = ImagePullState::Phase::ready;
    }
    const bool stale = !entry->base_matches_config() || !fs::exists(entry->base);
    const bool recheck = !entry->source().checksums_url.empty() &&
                         (!entry->checked_at || now - *entry->checked_at >= options_.recheck);
    const bool waiting = entry->failed_at && now - *entry->failed_at < options_.retry_after_failure;
    const bool failed = entry->phase == ImagePullState::Phase::failed;
    if ((stale || recheck || failed) && !waiting) {
      start_pull(*entry);
    }
  }
}

bool ImageStore::pull(const std::string& image) {
  std::lock_guard lock(mutex_);
  auto& found = entry(image);
  if (found.running) {
    return false;
  }
  start_pull(found);
  return true;
}

void ImageStore::start_pull(Entry& entry) {
  if (entry.worker.joinable()) {
    entry.worker.join();  // it has finished: `running` is false
  }
  entry.running = true;
  entry.worker = std::thread([this, &entry] { run_pull(entry, false); });
}

ImagePullState ImageStore::pull_now(const std::string& image,
                                    const std::function<void(const ImagePullState&)>& progress) {
  auto* found = &entry(image);
  {
    std::lock_guard lock(mutex_);
    if (found->running) {
      throw ImagePullError("a pull of image " + image + " is under way in this process");
    }
    found->running = true;
    found->progress = progress;
  }
  run_pull(*found, true);
  const auto result = *state(image);
  if (result.phase == ImagePullState::Phase::failed) {
    throw ImagePullError(result.error);
  }
  return result;
}

ImagePullState ImageStore::follow_pull(const std::string& image,
                                       const std::function<void(const ImagePullState&)>& progress,
                                       std::chrono::milliseconds interval) {
  pull(image);  // false: one is under way already, and this follows it
  for (;;) {
    const auto current = *state(image);
    {
      std::lock_guard lock(mutex_);
      if (!entry(image).running) {
        break;
      }
    }
    progress(current);
    std::this_thread::sleep_for(interval);
  }
  const auto result = *state(image);
  if (result.phase == ImagePullState::Phase::failed) {
    throw ImagePullError(result.error);
  }
  return result;
}

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
    log_.info("image " + name + ": pulling " + shown(entry.source().url) + " (" + expected.text() +
              ")");
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
    throw ImagePullError("the checksum file " + shown(source.checksums_url) + ": " + e.what());
  }
  {
    std::lock_guard guard(mutex_);
    entry.checked_at = Clock::now();
  }
  auto digest = digest_in_checksum_file(text, source.file_name());
  if (!digest) {
    throw ImagePullError("the checksum file " + shown(source.checksums_url) + " does not list " +
                         source.file_name());
  }
  return *digest;
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
  const auto part = downloads_dir() / (std::string(kFilePrefix) + entry.config.name + "-" +
                                       expected.short_hex() + ".part");
  // Another version's partials are no longer wanted.
  remove_partials([&](const std::string& file) {
    return is_file_of(file, entry.config.name, {".part", ".unpacked"}) &&
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
  Download sink(*this, entry, part, fd.get(), expected.algorithm);
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
  const auto stem = std::string(kFilePrefix) + entry.config.name + "-" + digest.short_hex();
  const auto unpacked = downloads_dir() / (stem + ".unpacked");
  // This process's own: a qemu-img that outlived another process's pull never writes into it.
  const auto temp = options_.base_dir / ("." + stem + ".qcow2.tmp." + std::to_string(::getpid()));
  const auto final_path = options_.base_dir / (stem + ".qcow2");
  std::error_code ec;
  try {
    auto input = downloaded;
    if (source.xz) {
      const auto size = tools_.unpacked_size(downloaded, stopping_);
      const auto unpacking = hold_room(downloads_dir(), unpacked, size, "the unpacked image");
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
          hold_room(options_.base_dir, temp, tools_.converted_size(input, source.format, stopping_),
                    "the converted base");
      tools_.convert_to_qcow2(input, source.format, temp, stopping_);
    }
    if (::chmod(temp.c_str(), 0444) != 0) {
      throw ImagePullError("making the base read-only: " + errno_text());
    }
    fs::rename(temp, final_path);
    fsync_directory(options_.base_dir);
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

std::unique_ptr<ImageStore::RoomHold> ImageStore::hold_room(const fs::path& directory,
                                                            const fs::path& file,
                                                            std::uint64_t bytes,
                                                            const std::string& what) {
  std::lock_guard guard(room_mutex_);
  const HeldRoom wanted{.file = file, .bytes = bytes};
  const auto need = still_to_write(wanted);
  const auto held = held_bytes(0);
  const auto left = room_less(directory, held);
  if (need > left) {
    throw ImagePullError("no room for " + what + ": it needs " + mib(need) + ", " + mib(left) +
                         " are left" +
                         (held > 0 ? " (" + mib(held) + " held by other pulls)" : ""));
  }
  const auto id = next_hold_id_++;
  auto hold = std::make_unique<RoomHold>(*this, id);
  holds_.emplace(id, wanted);
  return hold;
}

ImageStore::RoomHold::~RoomHold() {
  std::lock_guard guard(store_->room_mutex_);
  store_->holds_.erase(id_);
}

std::uint64_t ImageStore::room_left(const fs::path& directory, const RoomHold* own) const {
  std::lock_guard guard(room_mutex_);
  return room_less(directory, held_bytes(own == nullptr ? 0 : own->id()));
}

std::uint64_t ImageStore::room_less(const fs::path& directory, std::uint64_t held) const {
  const auto room = disk_.room(directory);
  return room > held ? room - held : 0;
}

std::uint64_t ImageStore::held_bytes(std::uint64_t except) const {
  std::uint64_t held = 0;
  for (const auto& [id, hold] : holds_) {
    held += id == except ? 0 : still_to_write(hold);
  }
  return held;
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

bool ImageStore::pulls(const std::string& image) const {
  return entries_.contains(image);  // fixed at construction: no lock (in_use calls it under one)
}

std::optional<ImageBase> ImageStore::ready(const std::string& image) const {
  std::lock_guard lock(mutex_);
  const auto found = entries_.find(image);
  if (found == entries_.end() || found->second->base.empty()) {
    return std::nullopt;
  }
  return ImageBase{.path = found->second->base, .format = "qcow2"};
}

std::optional<ImagePullState> ImageStore::state(const std::string& image) const {
  std::lock_guard lock(mutex_);
  const auto found = entries_.find(image);
  if (found == entries_.end()) {
    return std::nullopt;
  }
  const auto& entry = *found->second;
  return ImagePullState{.name = image,
                        .phase = entry.phase,
                        .bytes = entry.bytes,
                        .total = entry.total,
                        .error = entry.error.empty() ? entry.failure : entry.error,
                        .digest = entry.digest,
                        .has_base = !entry.base.empty()};
}

std::vector<ImagePullState> ImageStore::states() const {
  std::vector<std::string> names;
  {
    std::lock_guard lock(mutex_);
    for (const auto& [name, entry] : entries_) {
      names.push_back(name);
    }
  }
  std::vector<ImagePullState> out;
  for (const auto& name : names) {
    out.push_back(*state(name));
  }
  return out;
}

void ImageStore::remove_unused(const std::function<bool(const std::string& path)>& in_use) {
  std::lock_guard lock(mutex_);
  for (auto& [name, owned] : entries_) {
    auto& entry = owned;  // a name the lambda below may capture (clang 14 captures no binding)
    if (entry->running || entry->retired.paths.empty()) {
      continue;
    }
    const PullLock pull_lock(lock_path(name));
    if (!pull_lock.held()) {
      continue;  // the CLI pulls it: its record is about to change
    }
    reload_record(*entry);
    const auto removed = entry->retired.collect(unix_now(), options_.retired_grace, in_use);
    for (const auto& path : removed) {
      log_.info("image " + entry->config.name + ": removed the replaced base " + path +
                ", no guest uses it");
    }
    if (!removed.empty()) {
      save_record(*entry);
    }
  }
}

std::vector<std::string> ImageStore::remove(
    const std::string& image, const std::function<bool(const std::string& path)>& in_use) {
  std::lock_guard lock(mutex_);
  auto& found = entry(image);
  const PullLock pull_lock(lock_path(image));
  if (found.running || !pull_lock.held()) {
    throw ImagePullError("image " + image + " is being pulled; remove it when the pull ends");
  }
  reload_record(found);
  auto bases = found.retired.paths;
  if (!found.base.empty()) {
    bases.push_back(found.base);
  }
  for (const auto& path : bases) {
    if (in_use(path)) {
      throw ImagePullError("the base " + path + " of image " + image +
                           " backs guests that exist: delete them first");
    }
  }
  std::error_code ec;
  for (const auto& path : bases) {
    fs::remove(path, ec);
  }
  found.base.clear();
  found.digest.clear();
  found.retired = {};
  found.phase = ImagePullState::Phase::pulling;
  fs::remove(record_path(image), ec);
  remove_partials([&](const std::string& file) {
    return is_file_of(file, image, {".part", ".unpacked"});
  });
  return bases;
}

std::string ImageStore::render_metrics() const {
  PrometheusText text;
  text.family("garm_edge_image_pulled_bytes_total", "counter",
              "Bytes of images downloaded from their sources.");
  text.sample("garm_edge_image_pulled_bytes_total", {}, bytes_downloaded_.load());
  text.family("garm_edge_image_pulls_total", "counter",
              "Image pulls that ended: verified and converted, or failed.");
  text.sample("garm_edge_image_pulls_total", {{"outcome", "verified"}}, pulls_verified_.load());
  text.sample("garm_edge_image_pulls_total", {{"outcome", "failed"}}, pulls_failed_.load());
  text.family("garm_edge_image_ready", "gauge", "1 when the image has a base new guests use.");
  for (const auto& state : states()) {
    text.sample("garm_edge_image_ready", {{"image", state.name}},
                std::uint64_t{state.has_base ? 1U : 0U});
  }
  return text.str();
}

}  // namespace garm_edge::agent
