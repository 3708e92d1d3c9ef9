#include "agent/instances/startup_tracker.hpp"

#include <algorithm>
#include <cstdio>

namespace garm_edge::agent {
namespace {

const std::vector<double> kBuckets = {0.1, 0.25, 0.5, 1,   2.5, 5,   10,
                                      20,  30,   60,  120, 300, 600, 1200};

double seconds_between(std::chrono::system_clock::time_point from,
                       std::chrono::system_clock::time_point to) {
  return std::max(0.0, std::chrono::duration<double>(to - from).count());
}

std::string one_decimal(double seconds) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f", seconds);
  return text;
}

}  // namespace

std::string_view to_string(StartupPhase phase) {
  switch (phase) {
    case StartupPhase::received:
      return "received";
    case StartupPhase::bound:
      return "bound";
    case StartupPhase::restored:
      return "restored";
    case StartupPhase::defined:
      return "defined";
    case StartupPhase::started:
      return "started";
    case StartupPhase::seed_fetched:
      return "seed_fetched";
    case StartupPhase::first_status:
      return "first_status";
    case StartupPhase::idle:
      return "idle";
  }
  return "unknown";
}

std::string_view to_string(StartupFailure failure) {
  switch (failure) {
    case StartupFailure::create_failed:
      return "create_failed";
    case StartupFailure::guest_error:
      return "guest_error";
    case StartupFailure::deleted_first:
      return "deleted_first";
    case StartupFailure::bootstrap_timeout:
      return "bootstrap_timeout";
  }
  return "unknown";
}

std::string StartupTimeline::summary() const {
  if (marks.empty()) {
    return "";
  }
  const auto start = marks.front().second;
  std::string phases;
  for (std::size_t i = 1; i < marks.size(); ++i) {
    phases += (phases.empty() ? "" : ", ") + std::string(to_string(marks[i].first)) + " +" +
              one_decimal(seconds_between(start, marks[i].second)) + " s";
  }
  const auto head =
      failure ? "failed (" + std::string(to_string(*failure)) + ")"
              : "ready in " + one_decimal(seconds_between(start, marks.back().second)) + " s";
  return head + " (" + std::string(labels.start()) + ")" + (phases.empty() ? "" : ": " + phases);
}

StartupTracker::StartupTracker(const Clock& clock, Options options)
    : clock_(clock), options_(options) {}

StartupTracker::Key StartupTracker::key_of(const StartupTimeline& timeline) {
  const auto& labels = timeline.labels;
  auto pool = labels.pool;
  auto& slots = pool_slots_[timeline.controller];
  if (const auto slot = slots.find(pool); slot != slots.end()) {
    slot->second = clock_.now();
  } else if (slots.size() < options_.max_pools && pool_slot_count_ < options_.max_pool_slots) {
    slots.emplace(pool, clock_.now());
    ++pool_slot_count_;
  } else {
    pool = "other";
  }
  if (slots.empty()) {
    pool_slots_.erase(timeline.controller);
  }
  return {std::string(labels.start()), pool, labels.image, labels.flavor};
}

void StartupTracker::free_idle_pools(std::chrono::system_clock::time_point now) {
  const auto idle = [&](const auto& slot) { return now - slot.second > options_.pool_idle; };
  if (std::none_of(pool_slots_.begin(), pool_slots_.end(), [&](const auto& controller) {
        return std::any_of(controller.second.begin(), controller.second.end(), idle);
      })) {
    return;
  }
  std::set<std::pair<std::string, std::string>> tracked;  // controller, pool
  for (const auto& [domain, timeline] : timelines_) {
    tracked.emplace(timeline.controller, timeline.labels.pool);
  }
  std::set<std::string> freed;
  for (auto controller = pool_slots_.begin(); controller != pool_slots_.end();) {
    auto& slots = controller->second;
    for (auto slot = slots.begin(); slot != slots.end();) {
      if (idle(*slot) && !tracked.contains({controller->first, slot->first})) {
        freed.insert(slot->first);
        slot = slots.erase(slot);
        --pool_slot_count_;
      } else {
        ++slot;
      }
    }
    controller = slots.empty() ? pool_slots_.erase(controller) : std::next(controller);
  }
  for (const auto& [controller, slots] : pool_slots_) {
    for (const auto& [pool, used] : slots) {
      freed.erase(pool);  // another controller's pool of the same ID keeps its series
    }
  }
  const auto of_freed = [&freed](const Key& key) { return freed.contains(std::get<1>(key)); };
  std::erase_if(totals_, [&](const auto& entry) { return of_freed(entry.first); });
  std::erase_if(phases_, [&](const auto& entry) { return of_freed(entry.first.first); });
  std::erase_if(failures_, [&](const auto& entry) { return of_freed(entry.first.first); });
}

void StartupTracker::begin(const std::string& domain, const std::string& instance,
                           const std::string& controller, StartupLabels labels,
                           std::chrono::system_clock::time_point at) {
  std::lock_guard lock(mutex_);
  expire(clock_.now());
  const auto first = labels.warm ? StartupPhase::bound : StartupPhase::received;
  timelines_[domain] = StartupTimeline{.instance = instance,
                                       .controller = controller,
                                       .labels = std::move(labels),
                                       .marks = {{first, at}},
                                       .failure = std::nullopt};
}

std::optional<StartupTimeline> StartupTracker::mark(std::string_view domain, StartupPhase phase) {
  const auto now = clock_.now();
  std::lock_guard lock(mutex_);
  expire(now);
  const auto found = timelines_.find(domain);
  if (found == timelines_.end() || found->second.finished() ||
      found->second.marks.back().first >= phase) {
    return std::nullopt;
  }
  auto& timeline = found->second;
  const auto previous = timeline.marks.back().second;
  timeline.marks.emplace_back(phase, now);
  const auto key = key_of(timeline);
  auto [histogram, added] = phases_.try_emplace({key, std::string(to_string(phase))}, kBuckets);
  histogram->second.observe(seconds_between(previous, now));
  if (phase != StartupPhase::idle) {
    return std::nullopt;
  }
  auto [total, made] = totals_.try_emplace(key, kBuckets);
  total->second.observe(seconds_between(timeline.marks.front().second, now));
  return timeline;
}

void StartupTracker::fail(std::string_view domain, StartupFailure failure) {
  std::lock_guard lock(mutex_);
  const auto found = timelines_.find(domain);
  if (found == timelines_.end() || found->second.finished()) {
    return;
  }
  found->second.failure = failure;
  count_failure(found->second, failure);
}

void StartupTracker::forget(std::string_view domain) {
  std::lock_guard lock(mutex_);
  const auto found = timelines_.find(domain);
  if (found == timelines_.end()) {
    return;
  }
  if (!found->second.finished()) {
    count_failure(found->second, StartupFailure::deleted_first);
  }
  timelines_.erase(found);
}

std::optional<StartupTimeline> StartupTracker::timeline(std::string_view domain) const {
  std::lock_guard lock(mutex_);
  const auto found = timelines_.find(domain);
  if (found == timelines_.end()) {
    return std::nullopt;
  }
  return found->second;
}

void StartupTracker::count_failure(const StartupTimeline& timeline, StartupFailure failure) {
  ++failures_[{key_of(timeline), std::string(to_string(failure))}];
}

void StartupTracker::expire(std::chrono::system_clock::time_point now) {
  for (auto& [domain, timeline] : timelines_) {
    if (!timeline.finished() && now - timeline.marks.front().second > options_.bootstrap_timeout) {
      timeline.failure = StartupFailure::bootstrap_timeout;
      count_failure(timeline, StartupFailure::bootstrap_timeout);
    }
  }
  while (timelines_.size() >= options_.max_tracked) {
    // The oldest start goes first, a finished one before any still open.
    const auto oldest =
        std::min_element(timelines_.begin(), timelines_.end(), [](const auto& a, const auto& b) {
          return std::pair(!a.second.finished(), a.second.marks.front().second) <
                 std::pair(!b.second.finished(), b.second.marks.front().second);
        });
    timelines_.erase(oldest);
  }
  free_idle_pools(now);
}

std::string StartupTracker::render_metrics() {
  const auto now = clock_.now();
  std::lock_guard lock(mutex_);
  expire(now);
  PrometheusText text;
  const auto labels_of = [](const Key& key) {
    return PrometheusText::LabelList{{"start", std::get<0>(key)},
                                     {"pool", std::get<1>(key)},
                                     {"image", std::get<2>(key)},
                                     {"flavor", std::get<3>(key)}};
  };
  text.family("garm_edge_startup_seconds", "histogram",
              "From garm's CreateInstance (cold) or the binding of a warm guest to the runner's "
              "idle report.");
  for (const auto& [key, histogram] : totals_) {
    histogram.render(text, "garm_edge_startup_seconds", labels_of(key));
  }
  text.family("garm_edge_startup_phase_seconds", "histogram",
              "One phase of a runner's start: from the phase before it to this one.");
  for (const auto& [key, histogram] : phases_) {
    auto labels = labels_of(key.first);
    labels.emplace_back("phase", key.second);
    histogram.render(text, "garm_edge_startup_phase_seconds", labels);
  }
  text.family("garm_edge_startup_failures_total", "counter",
              "Starts that never reached idle, by reason.");
  for (const auto& [key, count] : failures_) {
    auto labels = labels_of(key.first);
    labels.emplace_back("reason", key.second);
    text.sample("garm_edge_startup_failures_total", labels, count);
  }
  const auto open = std::count_if(timelines_.begin(), timelines_.end(),
                                  [](const auto& entry) { return !entry.second.finished(); });
  text.family("garm_edge_startups_in_progress", "gauge", "Starts not yet idle nor failed.");
  text.sample("garm_edge_startups_in_progress", {}, static_cast<std::uint64_t>(open));
  return text.str();
}

}  // namespace garm_edge::agent
