#include "hub/state_watcher.hpp"

#include "common/unix_time.hpp"
#include "hub/hub_state.hpp"

namespace garm_edge::hub {

StateWatcher::StateWatcher(HubStore& store, Logger& log, Timing timing, std::string hub_url,
                           std::function<void()> changed)
    : store_(store),
      log_(log),
      timing_(timing),
      hub_url_(std::move(hub_url)),
      changed_(std::move(changed)) {}

StateWatcher::~StateWatcher() {
  stop();
}

void StateWatcher::start() {
  generation_ = store_.agents_generation();
  replace_agents(store_.agents(), notes_made());
  follow_hubs_safely();
  {
    std::lock_guard lock(mutex_);
    stopping_ = false;
  }
  thread_ = std::thread([this] { run(); });
}

void StateWatcher::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) {
    thread_.join();
  }
}

std::vector<AgentRecord> StateWatcher::agents() const {
  std::lock_guard lock(mutex_);
  std::vector<AgentRecord> agents;
  agents.reserve(agents_.size());
  for (const auto& [name, agent] : agents_) {
    agents.push_back(agent);
  }
  return agents;
}

std::optional<AgentRecord> StateWatcher::known(const std::string& name) const {
  std::lock_guard lock(mutex_);
  const auto found = agents_.find(name);
  return found == agents_.end() ? std::nullopt : std::optional(found->second);
}

std::optional<AgentRecord> StateWatcher::accepting(const std::string& name,
                                                   const std::string& serial, UnixSeconds now) {
  if (auto agent = known(name); agent && agent->accepts(serial, now)) {
    return agent;
  }
  auto agent = store_.agent(name);
  if (!agent || !agent->accepts(serial, now)) {
    return std::nullopt;
  }
  note(*agent);
  return agent;
}

void StateWatcher::note(const AgentRecord& agent) {
  std::lock_guard lock(mutex_);
  agents_.insert_or_assign(agent.name, agent);
  notes_.insert_or_assign(agent.name, std::pair(++notes_made_, agent));
}

void StateWatcher::replace_agents(std::vector<AgentRecord> read, std::uint64_t notes_before) {
  std::map<std::string, AgentRecord> agents;
  for (auto& agent : read) {
    agents.emplace(agent.name, std::move(agent));
  }
  std::lock_guard lock(mutex_);
  for (auto note = notes_.begin(); note != notes_.end();) {
    if (note->second.first > notes_before) {
      agents.insert_or_assign(note->first, note->second.second);  // newer than this read
      ++note;
    } else {
      note = notes_.erase(note);
    }
  }
  agents_ = std::move(agents);
}

std::vector<std::string> StateWatcher::hub_urls() const {
  std::vector<std::string> urls{hub_url_};
  std::lock_guard lock(mutex_);
  urls.insert(urls.end(), other_hubs_.begin(), other_hubs_.end());
  return urls;
}

void StateWatcher::follow_hubs() {
  const auto now = std::chrono::steady_clock::now();
  const auto unix_seconds = unix_now();
  if (now >= next_announcement_) {
    store_.state().announce_hub(hub_url_, unix_seconds);
    next_announcement_ = now + timing_.announce_interval;
  }
  std::vector<std::string> others;
  for (const auto& hub : store_.state().hubs()) {
    if (hub.url != hub_url_ &&
        hub.announced_at >= unix_seconds - timing_.hub_silent_after.count()) {
      others.push_back(hub.url);
    }
  }
  std::lock_guard lock(mutex_);
  other_hubs_ = std::move(others);
}

std::uint64_t StateWatcher::notes_made() const {
  std::lock_guard lock(mutex_);
  return notes_made_;
}

void StateWatcher::check_now() {
  {
    std::lock_guard lock(mutex_);
    check_asked_ = true;
  }
  wake_.notify_all();
}

void StateWatcher::run() {
  unsigned ticks = 0;
  std::unique_lock lock(mutex_);
  while (true) {
    wake_.wait_for(lock, timing_.tick, [this] { return stopping_ || check_asked_; });
    if (stopping_) {
      return;
    }
    check_asked_ = false;
    lock.unlock();
    const bool full = ++ticks >= timing_.full_check_ticks;
    if (check(full) || full) {
      ticks = 0;
    }
    lock.lock();
  }
}

bool StateWatcher::check(bool full) {
  try {
    const auto generation = store_.agents_generation();
    if (generation == generation_ && !full) {
      return false;
    }
    const auto notes_before = notes_made();
    auto read = store_.agents();
    if (generation != generation_) {
      store_.sync_crl();  // a revocation moves the generation: the whole list only then
    }
    store_.refresh_crl(unix_now());
    replace_agents(std::move(read), notes_before);
    generation_ = generation;
    if (failing_) {
      failing_ = false;
      log_.info("the hub's records (" + store_.state().describe() + ") can be read again");
    }
  } catch (const std::exception& e) {
    if (!failing_) {
      failing_ = true;
      log_.warning("the hub's records cannot be read, serving the agents read last: " +
                   std::string(e.what()));
    }
    return false;
  }
  if (full) {
    follow_hubs_safely();
  }
  changed_();
  return true;
}

void StateWatcher::follow_hubs_safely() {
  // Apart from the agents: a registry that cannot be written leaves the agents' reads as they
  // are, and is said once.
  try {
    follow_hubs();
    hubs_failing_ = false;
  } catch (const std::exception& e) {
    if (!hubs_failing_) {
      hubs_failing_ = true;
      log_.warning("cannot announce this hub to the others (" + store_.state().describe() +
                   "), agents keep the hubs they know: " + std::string(e.what()));
    }
  }
}

}  // namespace garm_edge::hub
