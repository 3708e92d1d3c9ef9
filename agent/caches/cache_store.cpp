#include "agent/caches/cache_store.hpp"

#include <fstream>

#include <nlohmann/json.hpp>

#include "agent/images/image_fetcher.hpp"
#include "common/config_error.hpp"
#include "common/durable_file.hpp"

namespace garm_edge::agent {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kRecordFile = "generations.json";
constexpr std::uint64_t kStatusDiskBytes = 1024 * 1024;

/// QEMU (libvirt-qemu) opens the generations and the builder's disks: the agent's umask would
/// make the directories private.
void make_shared_directory(const fs::path& directory) {
  std::error_code ec;
  fs::create_directories(directory, ec);
  fs::permissions(directory, fs::perms(0755), ec);
  if (!fs::is_directory(directory)) {
    throw ConfigError("cache generations go to " + directory.string() +
                      ", which is not a directory the agent can make: make it, or set [agent] "
                      "caches_dir");
  }
}

std::string generation_file(std::uint64_t number) {
  return "gen-" + std::to_string(number) + ".qcow2";
}

/// What an interrupted refresh left: its disks and a half-written generation.
bool is_leftover(const std::string& file) {
  return file.starts_with("work-") || file.starts_with("status-") || file.ends_with(".tmp");
}

nlohmann::json outcome_to_json(const RefreshOutcome& outcome) {
  return {{"ok", outcome.ok},
          {"finished_at", outcome.finished_at},
          {"seconds", outcome.seconds},
          {"error", outcome.error}};
}

RefreshOutcome outcome_from_json(const nlohmann::json& json) {
  return {.ok = json.value("ok", false),
          .finished_at = json.value("finished_at", std::string()),
          .seconds = json.value("seconds", 0.0),
          .error = json.value("error", std::string())};
}

std::int64_t unix_seconds(std::chrono::system_clock::time_point time) {
  return std::chrono::duration_cast<std::chrono::seconds>(time.time_since_epoch()).count();
}

}  // namespace

CacheStore::CacheStore(const AgentConfig& config, CacheDiskTools& tools, const Clock& clock,
                       Logger& log)
    : directory_(config.cache_directory()),
      tools_(tools),
      clock_(clock),
      log_(log),
      retired_grace_(config.replaced_grace) {
  if (config.caches.empty()) {
    return;
  }
  make_shared_directory(directory_);
  for (const auto& cache : config.caches) {
    auto& entry = entries_[cache.name];
    entry.config = &cache;
    make_shared_directory(directory_of(cache.name));
    load(entry);
  }
}

fs::path CacheStore::directory_of(const std::string& cache) const {
  return directory_ / cache;
}

CacheStore::Entry& CacheStore::entry(const std::string& cache) {
  const auto found = entries_.find(cache);
  if (found == entries_.end()) {
    throw ImagePullError("no cache \"" + cache + "\" is configured");
  }
  return found->second;
}

const CacheStore::Entry& CacheStore::entry(const std::string& cache) const {
  return const_cast<CacheStore*>(this)->entry(cache);
}

void CacheStore::load(Entry& entry) {
  const auto& name = entry.config->name;
  const auto directory = directory_of(name);
  try {
    if (const auto text = read_file(directory / kRecordFile)) {
      const auto record = nlohmann::json::parse(*text);
      if (const auto current = record.find("current"); current != record.end()) {
        const auto number = current->at("number").get<std::uint64_t>();
        entry.current = CacheGeneration{.cache = name,
                                        .number = number,
                                        .path = (directory / generation_file(number)).string()};
        entry.current_made_at = current->value("made_at", std::string());
      }
      entry.retired.paths = record.value("retired", std::vector<std::string>());
      entry.retired.retired_at = record.value("retired_at", std::map<std::string, std::int64_t>());
      if (const auto last = record.find("last_refresh"); last != record.end()) {
        entry.last_refresh = outcome_from_json(*last);
        entry.last_refresh_time = parse_rfc3339(entry.last_refresh->finished_at);
      }
      entry.refreshes_ok = record.value("refreshes_ok", std::uint64_t{0});
      entry.refreshes_failed = record.value("refreshes_failed", std::uint64_t{0});
    }
  } catch (const std::exception& e) {
    // The generations stay on disk; a refresh makes a new one.
    log_.warning("cache " + name + ": its record is unreadable (" + e.what() +
                 "); it has no generation until it is refreshed");
    const auto* config = entry.config;
    entry = Entry();
    entry.config = config;
  }
  if (entry.current && !fs::exists(entry.current->path)) {
    log_.warning("cache " + name + ": its generation " + entry.current->path +
                 " is gone; it has none until it is refreshed");
    entry.current.reset();
  }
  std::error_code ec;
  for (fs::directory_iterator it(directory, ec), end; !ec && it != end; it.increment(ec)) {
    if (is_leftover(it->path().filename().string())) {
      fs::remove(it->path(), ec);
    }
  }
}

void CacheStore::save(const Entry& entry) const {
  nlohmann::json record{{"retired", entry.retired.paths},
                        {"retired_at", entry.retired.retired_at},
                        {"refreshes_ok", entry.refreshes_ok},
                        {"refreshes_failed", entry.refreshes_failed}};
  if (entry.current) {
    record["current"] = {{"number", entry.current->number}, {"made_at", entry.current_made_at}};
  }
  if (entry.last_refresh) {
    record["last_refresh"] = outcome_to_json(*entry.last_refresh);
  }
  write_atomically(directory_of(entry.config->name) / kRecordFile, record.dump(2) + "\n", 0644);
}

std::optional<CacheGeneration> CacheStore::current(const std::string& cache) const {
  std::lock_guard lock(mutex_);
  const auto found = entries_.find(cache);
  return found == entries_.end() ? std::nullopt : found->second.current;
}

void CacheStore::remove_unused(const std::function<bool(const std::string& path)>& in_use) {
  std::lock_guard lock(mutex_);
  for (auto& [name, entry] : entries_) {
    const auto removed = entry.retired.collect(unix_seconds(clock_.now()), retired_grace_, in_use);
    for (const auto& path : removed) {
      log_.info("cache " + entry.config->name + ": removed the replaced generation " + path +
                ", no guest uses it");
    }
    if (!removed.empty()) {
      save(entry);
    }
  }
}

std::vector<CacheState> CacheStore::states() const {
  std::lock_guard lock(mutex_);
  std::vector<CacheState> states;
  for (const auto& [name, entry] : entries_) {
    states.push_back({.name = name,
                      .current = entry.current,
                      .current_made_at = entry.current_made_at,
                      .retired = entry.retired.paths.size(),
                      .refreshing = entry.refreshing,
                      .last_refresh = entry.last_refresh,
                      .refreshes_ok = entry.refreshes_ok,
                      .refreshes_failed = entry.refreshes_failed});
  }
  return states;
}

bool CacheStore::begin_refresh(const std::string& cache) {
  std::lock_guard lock(mutex_);
  auto& found = entry(cache);
  if (found.refreshing) {
    return false;
  }
  found.refreshing = true;
  return true;
}

RefreshDisks CacheStore::prepare(const std::string& cache, const std::atomic<bool>& stop) {
  std::optional<CacheGeneration> base;
  std::uint64_t size_gib = 0;
  {
    std::lock_guard lock(mutex_);
    const auto& found = entry(cache);
    base = found.current;
    size_gib = found.config->size_gib;
  }
  RefreshDisks disks;
  disks.next_generation = base ? base->number + 1 : 1;
  const auto directory = directory_of(cache);
  const auto suffix = std::to_string(disks.next_generation);
  disks.work = directory / ("work-" + suffix + ".qcow2");
  disks.status = directory / ("status-" + suffix + ".raw");
  std::error_code ec;
  fs::remove(disks.work, ec);
  tools_.create(disks.work, size_gib << 30U,
                base ? std::optional<fs::path>(base->path) : std::nullopt, stop);
  {
    std::ofstream status(disks.status, std::ios::binary | std::ios::trunc);
    status.close();
    fs::resize_file(disks.status, kStatusDiskBytes, ec);
    if (!status || ec) {
      throw ImagePullError("creating the status disk " + disks.status.string() + " failed");
    }
  }
  fs::permissions(disks.status, fs::perms(0644), ec);
  return disks;
}

CacheGeneration CacheStore::adopt(const std::string& cache, const RefreshDisks& disks,
                                  const std::atomic<bool>& stop) {
  tools_.check(disks.work, stop);
  const auto directory = directory_of(cache);
  const auto final_path = directory / generation_file(disks.next_generation);
  const auto temporary = fs::path(final_path.string() + ".tmp");
  tools_.flatten(disks.work, temporary, stop);
  try {
    publish_file(temporary, final_path, 0644);  // QEMU (libvirt-qemu) opens it
  } catch (const DurableFileError& e) {
    std::error_code ignored;
    fs::remove(temporary, ignored);
    throw ImagePullError(std::string("keeping the new generation: ") + e.what());
  }

  std::lock_guard lock(mutex_);
  auto& found = entry(cache);
  if (found.current) {
    found.retired.retire(found.current->path, unix_seconds(clock_.now()));
  }
  found.current =
      CacheGeneration{.cache = cache, .number = disks.next_generation, .path = final_path.string()};
  found.current_made_at = format_rfc3339(clock_.now());
  found.retired.forget(final_path.string());
  save(found);
  return *found.current;
}

void CacheStore::end_refresh(const std::string& cache, const RefreshDisks& disks,
                             RefreshOutcome outcome) {
  std::error_code ec;
  fs::remove(disks.work, ec);
  fs::remove(disks.status, ec);
  std::lock_guard lock(mutex_);
  auto& found = entry(cache);
  found.refreshing = false;
  (outcome.ok ? found.refreshes_ok : found.refreshes_failed) += 1;
  found.last_refresh_time = clock_.now();
  outcome.finished_at = format_rfc3339(*found.last_refresh_time);
  found.last_refresh = std::move(outcome);
  try {
    save(found);
  } catch (const std::exception& e) {
    log_.warning("cache " + cache + ": its record could not be written: " + e.what());
  }
  refresh_ended_.notify_all();
}

std::optional<RefreshOutcome> CacheStore::follow_refresh(const std::string& cache,
                                                         const std::atomic<bool>& stop) {
  std::unique_lock lock(mutex_);
  auto& found = entry(cache);
  if (!found.refreshing) {
    return std::nullopt;
  }
  // In slices: `stop` is set without this lock.
  while (found.refreshing && !stop) {
    refresh_ended_.wait_for(lock, std::chrono::milliseconds(200));
  }
  if (found.refreshing) {
    return std::nullopt;
  }
  return found.last_refresh;
}

std::optional<std::chrono::system_clock::time_point> CacheStore::last_refresh_time(
    const std::string& cache) const {
  std::lock_guard lock(mutex_);
  return entry(cache).last_refresh_time;
}

}  // namespace garm_edge::agent
