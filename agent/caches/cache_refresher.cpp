#include "agent/caches/cache_refresher.hpp"

#include <algorithm>
#include <fstream>
#include <stdexcept>

#include "agent/images/image_fetcher.hpp"
#include "common/durable_file.hpp"
#include "common/text.hpp"
#include "userdata/userdata.hpp"

namespace garm_edge::agent {
namespace {

constexpr std::string_view kStatusPrefix = "garm-edge-refresh exit=";
constexpr std::size_t kStatusHeadBytes = 64 * 1024;

std::string read_head(const std::filesystem::path& file, std::size_t limit) {
  std::ifstream in(file, std::ios::binary);
  std::string head(limit, '\0');
  in.read(head.data(), static_cast<std::streamsize>(limit));
  head.resize(static_cast<std::size_t>(in.gcount()));
  return head;
}

std::string read_script(const CacheConfig& cache) {
  const auto script = read_file(cache.refresh.script);
  if (!script) {
    throw std::runtime_error("its refresh_script " + cache.refresh.script.string() + " is gone");
  }
  if (script->size() > kMaxRefreshScriptBytes) {
    throw std::runtime_error("its refresh_script " + cache.refresh.script.string() +
                             " is larger than 64 KiB");
  }
  return *script;
}

/// The end of the script's output, the part that says why it failed, on one printable line.
std::string output_tail(const std::string& output) {
  constexpr std::size_t kTail = 400;
  const auto tail = output.size() > kTail ? output.substr(output.size() - kTail) : output;
  std::string line;
  for (const char c : tail) {
    line += (c == '\n' || c == '\t') ? ' ' : c;
  }
  return printable_excerpt(line, kTail + 16);
}

}  // namespace

std::optional<BuilderStatus> parse_builder_status(std::string_view disk_head) {
  if (!disk_head.starts_with(kStatusPrefix)) {
    return std::nullopt;
  }
  const auto line_end = disk_head.find('\n');
  if (line_end == std::string_view::npos) {
    return std::nullopt;
  }
  const auto code = disk_head.substr(kStatusPrefix.size(), line_end - kStatusPrefix.size());
  if (code.empty() || code.size() > 3 ||
      code.find_first_not_of("0123456789") != std::string_view::npos) {
    return std::nullopt;
  }
  auto output = disk_head.substr(line_end + 1);
  output = output.substr(0, output.find('\0'));  // the rest of dd's block is padding
  return BuilderStatus{.exit_code = std::stoi(std::string(code)), .output = std::string(output)};
}

CacheRefresher::CacheRefresher(const AgentConfig& config, CacheStore& store,
                               InstanceService& instances, const Clock& clock, Logger& log,
                               Options options)
    : config_(config),
      store_(store),
      instances_(instances),
      clock_(clock),
      log_(log),
      options_(options) {}

CacheRefresher::~CacheRefresher() {
  stop();
}

void CacheRefresher::stop() {
  stopping_ = true;
  std::vector<Running> threads;
  {
    std::lock_guard lock(threads_mutex_);
    threads.swap(threads_);
  }
  for (auto& running : threads) {
    running.thread.join();
  }
}

RefreshOutcome CacheRefresher::refresh(const std::string& cache,
                                       const std::function<void()>& waiting) {
  const auto* configured = config_.find_cache(cache);
  if (configured == nullptr) {
    throw std::invalid_argument("no cache \"" + printable_excerpt(cache) + "\" is configured");
  }
  // A refresh under way already (the agent's own, at its start or on schedule) is followed to
  // its end, as `images pull` follows a pull.
  while (!store_.begin_refresh(configured->name)) {
    if (auto outcome = store_.follow_refresh(configured->name, stopping_)) {
      return *outcome;
    }
    if (stopping_) {
      return {.ok = false, .finished_at = "", .seconds = 0, .error = "the agent is stopping"};
    }
  }
  return run(*configured, waiting);
}

bool CacheRefresher::due(const CacheConfig& cache) const {
  if (cache.refresh.every.count() == 0) {
    return !store_.current(cache.name) && !store_.last_refresh_time(cache.name);
  }
  const auto last = store_.last_refresh_time(cache.name);
  if (!last) {
    return true;
  }
  const auto states = store_.states();
  const auto state = std::find_if(states.begin(), states.end(),
                                  [&](const CacheState& s) { return s.name == cache.name; });
  const bool failed = state != states.end() && state->last_refresh && !state->last_refresh->ok;
  const auto wait =
      failed ? std::min<std::chrono::seconds>(cache.refresh.every, options_.retry_after_failure)
             : cache.refresh.every;
  return clock_.now() - *last >= wait;
}

void CacheRefresher::launch(const CacheConfig& cache) {
  auto done = std::make_shared<std::atomic<bool>>(false);
  std::lock_guard lock(threads_mutex_);
  std::erase_if(threads_, [](Running& running) {
    if (!running.done->load()) {
      return false;
    }
    running.thread.join();
    return true;
  });
  threads_.push_back({.thread = std::thread([this, &cache, done] {
                        try {
                          run(cache, {});
                        } catch (const std::exception& e) {  // run says why itself; never end
                          log_.error("cache " + cache.name + ": " + e.what());
                        }
                        *done = true;
                      }),
                      .done = done});
}

void CacheRefresher::start_due() {
  for (const auto& cache : config_.caches) {
    if (!stopping_ && due(cache) && store_.begin_refresh(cache.name)) {
      launch(cache);
    }
  }
}

bool CacheRefresher::start(const std::string& cache) {
  const auto* configured = config_.find_cache(cache);
  if (configured == nullptr) {
    throw std::invalid_argument("no cache \"" + printable_excerpt(cache) + "\" is configured");
  }
  if (stopping_ || !store_.begin_refresh(cache)) {
    return false;
  }
  launch(*configured);
  return true;
}

RefreshOutcome CacheRefresher::run(const CacheConfig& cache, const std::function<void()>& waiting) {
  const auto began = std::chrono::steady_clock::now();
  log_.info("cache " + cache.name + ": refreshing with " + cache.refresh.script.string() +
            " in a builder of image " + cache.refresh.image);
  RefreshDisks disks;
  RefreshOutcome outcome;
  try {
    disks = store_.prepare(cache.name, stopping_);
    build(cache, disks, waiting);
    const auto status = parse_builder_status(read_head(disks.status, kStatusHeadBytes));
    if (!status) {
      throw std::runtime_error(
          "the builder powered off without writing its status: the script never ran (its "
          "image needs cloud-init, and the builder's console log says why)");
    }
    if (status->exit_code != 0) {
      throw std::runtime_error("the refresh script exited with " +
                               std::to_string(status->exit_code) + ": " +
                               output_tail(status->output));
    }
    const auto generation = store_.adopt(cache.name, disks, stopping_);
    outcome.ok = true;
    log_.info("cache " + cache.name + ": generation " + std::to_string(generation.number) +
              " is current");
  } catch (const std::exception& e) {
    outcome.error = e.what();
    log_.error("cache " + cache.name +
               ": the refresh failed, the last generation stays: " + outcome.error);
  }
  outcome.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
  store_.end_refresh(cache.name, disks, outcome);
  return outcome;
}

void CacheRefresher::build(const CacheConfig& cache, const RefreshDisks& disks,
                           const std::function<void()>& waiting) {
  const auto user_data = userdata::render_cache_builder(
      {.script = read_script(cache), .filesystem = cache.filesystem, .mount = cache.mount});
  const auto builder = instances_.create_builder(
      {.cache = cache.name,
       .image = cache.refresh.image,
       .flavor = cache.refresh.flavor,
       .user_data = user_data,
       .disks = {
           {.path = disks.work.string(), .format = "qcow2", .serial = "garm-cache-work"},
           {.path = disks.status.string(), .format = "raw", .serial = "garm-refresh-status"}}});
  const auto deadline = std::chrono::steady_clock::now() + cache.refresh.timeout;
  std::string failure;
  while (true) {
    const auto state = instances_.builder_state(builder);
    if (!state || *state == hypervisor::PowerState::shutoff ||
        *state == hypervisor::PowerState::crashed) {
      break;
    }
    if (stopping_) {
      failure = "the agent is stopping";
      break;
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      failure = "the builder did not power off within refresh_timeout_minutes (" +
                std::to_string(cache.refresh.timeout.count() / 60) + ")";
      break;
    }
    if (waiting) {
      waiting();
    }
    std::this_thread::sleep_for(options_.poll);
  }
  instances_.remove_builder(builder);
  if (!failure.empty()) {
    throw std::runtime_error(failure);
  }
}

}  // namespace garm_edge::agent
