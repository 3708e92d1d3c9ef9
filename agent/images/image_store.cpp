#include "agent/images/image_store.hpp"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "agent/images/image_files.hpp"
#include "agent/images/image_store_entry.hpp"
#include "common/durable_file.hpp"
#include "common/prometheus_text.hpp"
#include "common/unix_time.hpp"

namespace garm_edge::agent {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

ImageStore::ImageStore(std::vector<ImageConfig> images, ImageStoreOptions options,
                       ImageFetcher& fetcher, ImageTools& tools, PullDisk& disk, Logger& log)
    : options_(std::move(options)), fetcher_(fetcher), tools_(tools), log_(log), room_(disk) {
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
      return is_image_file_of(file, named.first, {".part", ".unpacked"});
    });
  });
}

void ImageStore::remove_partials(const std::function<bool(const std::string& file)>& unwanted) {
  std::error_code ec;
  for (fs::directory_iterator it(downloads_dir(), ec), end; !ec && it != end; it.increment(ec)) {
    const auto file = it->path().filename().string();
    if (file.starts_with(kImageFilePrefix) && unwanted(file)) {
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
    return is_image_file_of(file, image, {".part", ".unpacked"});
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
