#include "agent/instances/warm_pool.hpp"

#include <algorithm>

#include "agent/instances/warm_spec.hpp"
#include "common/prometheus_text.hpp"

namespace garm_edge::agent {
namespace {

constexpr auto kBackoff = std::chrono::seconds(30);

/// The order warm guests are kept in when there are more than wanted: the first are kept.
int usefulness(WarmState state) {
  switch (state) {
    case WarmState::saved:
      return 0;  // costs no memory, and took longest to make
    case WarmState::ready:
      return 1;
    default:
      return 2;
  }
}

}  // namespace

void WarmPool::Kept::add(const InstanceRecord& guest, std::uint64_t memory_mib) {
  switch (guest.warm->state) {
    case WarmState::saved:
      ++saved;
      saved_mib += memory_mib;
      return;
    case WarmState::ready:
      ready.push_back(guest.domain_name);
      return;
    default:
      ++warming;
  }
}

WarmPool::WarmPool(InstanceService& service, const Clock& clock, Logger& log)
    : service_(service), clock_(clock), log_(log) {}

bool WarmPool::retire(const InstanceRecord& record, const std::string& why, Pass& pass) {
  try {
    // The warm controller's ID: a guest bound to garm meanwhile is not found, so not removed.
    if (service_.remove(ControllerId::parse(kWarmControllerId), InstanceRef::parse(record.name))) {
      log_.info("warm guest " + record.domain_name + " removed: " + why);
      return true;
    }
  } catch (const std::exception& e) {
    ++pass.failures;
    log_.warning("warm guest " + record.domain_name + " could not be removed (" + why +
                 "): " + e.what());
  }
  return false;
}

bool WarmPool::runs(const InstanceRecord& record) {
  const auto instance =
      service_.get(ControllerId::parse(kWarmControllerId), InstanceRef::parse(record.name));
  return instance && instance->status == wire::InstanceStatus::running;
}

void WarmPool::start_one(const std::string& spec, const WarmConfig& warm, Pass& pass,
                         std::map<std::string, std::size_t>& states) {
  try {
    const auto made = service_.create_warm(warm);
    ++pass.started;
    ++states["warming"];
    log_.info("warm guest " + made.name + " started for " + warm.name);
  } catch (const ServiceError& e) {
    if (e.code() == ServiceError::Code::no_capacity || e.code() == ServiceError::Code::draining) {
      return;  // not a failure: garm's creates come first
    }
    ++pass.failures;
    backoff_until_[spec] = clock_.now() + kBackoff;
    log_.warning("warm guest for " + warm.name + " could not be started: " + e.what());
  }
}

WarmPool::Pass WarmPool::pass() {
  Pass pass;
  try {
    const auto& config = service_.config();
    std::map<std::string, const WarmConfig*> by_spec;
    for (const auto& warm : config.warm) {
      by_spec[warm_spec_of(config, warm)] = &warm;
    }
    std::map<std::string, Kept> kept;  // by spec
    std::map<std::string, std::size_t> states;
    const auto now = clock_.now();
    auto guests = service_.warm_guests();
    // Saved, then ready, then warming, then oldest first: beyond the count, the least useful go.
    std::sort(guests.begin(), guests.end(), [](const auto& a, const auto& b) {
      const auto rank_a = usefulness(a.warm->state);
      const auto rank_b = usefulness(b.warm->state);
      return rank_a != rank_b ? rank_a < rank_b : a.created_at < b.created_at;
    });
    for (const auto& guest : guests) {
      const auto entry = by_spec.find(guest.warm->spec);
      const auto created = parse_rfc3339(guest.created_at);
      auto& ours = kept[guest.warm->spec];
      if (entry == by_spec.end()) {
        pass.retired += retire(guest, "its [[warm]] entry or its settings changed", pass) ? 1U : 0U;
      } else if (guest.warm->state == WarmState::warming && created &&
                 now - *created > entry->second->ready_timeout) {
        pass.expired += retire(guest,
                               "not ready within " +
                                   std::to_string(entry->second->ready_timeout.count()) + " s",
                               pass)
                            ? 1U
                            : 0U;
      } else if (guest.warm->state == WarmState::saving) {
        // Only this pass saves, so this save was cut off (the agent stopped during it).
        pass.retired += retire(guest, "its save was interrupted", pass) ? 1U : 0U;
      } else if (ours.total() >= entry->second->count + entry->second->saved) {
        pass.retired +=
            retire(guest, "more warm guests than [[warm]] count and saved", pass) ? 1U : 0U;
      } else if (guest.warm->state == WarmState::saved ? !service_.saved_intact(guest)
                                                       : !runs(guest)) {
        // Shut off (a host reboot, a guest that powered itself off), started by hand while
        // saved, or gone: it would never be bound, and it holds its share of the host.
        pass.retired += retire(guest, "its domain is not as its record says", pass) ? 1U : 0U;
      } else {
        ours.add(guest, flavor_memory_mib(*entry->second));
        ++states[std::string(to_string(guest.warm->state))];
      }
    }
    std::uint64_t saved_mib = 0;
    for (const auto& [spec, ours] : kept) {
      saved_mib += ours.saved_mib;
    }
    for (const auto& [spec, warm] : by_spec) {
      auto& ours = kept[spec];
      save_beyond_count(*warm, ours, saved_mib, pass, states);
      if (ours.total() < warm->count + saved_target(*warm, ours, saved_mib) &&
          now >= backoff_until_[spec]) {
        start_one(spec, *warm, pass, states);
      }
    }
    std::lock_guard lock(mutex_);
    by_state_ = std::move(states);
  } catch (const std::exception& e) {
    ++pass.failures;
    log_.warning(std::string("warm pool pass failed: ") + e.what());
  }
  started_ += pass.started;
  wasted_ += pass.expired;
  retired_ += pass.retired;
  saved_ += pass.saved;
  return pass;
}

std::uint64_t WarmPool::flavor_memory_mib(const WarmConfig& warm) const {
  const auto* flavor = service_.config().find_flavor(warm.flavor);
  return flavor == nullptr ? 0 : flavor->memory_mib;
}

std::size_t WarmPool::saved_target(const WarmConfig& warm, const Kept& ours,
                                   std::uint64_t saved_mib) const {
  const auto bound_mib = service_.config().capacity.max_saved_gib * 1024;
  const auto each = flavor_memory_mib(warm);
  if (warm.saved <= ours.saved || bound_mib == 0 || each == 0) {
    return warm.saved;
  }
  // Those saved now, and as many more as the bound on saved memory leaves room for.
  const auto room = bound_mib > saved_mib ? (bound_mib - saved_mib) / each : 0;
  return std::min<std::size_t>(warm.saved, ours.saved + static_cast<std::size_t>(room));
}

void WarmPool::save_beyond_count(const WarmConfig& warm, Kept& ours, std::uint64_t& saved_mib,
                                 Pass& pass, std::map<std::string, std::size_t>& states) {
  // Ready guests beyond `count` running ones are saved, up to the entry's saved target.
  while (!ours.ready.empty() && ours.running() > warm.count &&
         ours.saved < saved_target(warm, ours, saved_mib)) {
    const auto guest = ours.ready.front();
    ours.ready.erase(ours.ready.begin());
    --states["ready"];
    try {
      const auto began = std::chrono::steady_clock::now();
      if (!service_.save_warm(guest)) {
        continue;  // bound or removed meanwhile
      }
      ++pass.saved;
      ++ours.saved;
      ++states["saved"];
      saved_mib += flavor_memory_mib(warm);
      log_.info("warm guest " + guest + " saved to disk in " +
                std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::steady_clock::now() - began)
                                   .count()) +
                " ms");
    } catch (const std::exception& e) {
      ++pass.failures;  // save_warm removed it and said why; the next pass starts another
    }
  }
}

std::string WarmPool::render_metrics() const {
  PrometheusText text;
  text.family("garm_edge_warm_guests", "gauge", "Warm guests by state, as of the last pass.");
  {
    std::lock_guard lock(mutex_);
    for (const char* state : {"warming", "ready", "saved"}) {
      const auto it = by_state_.find(state);
      text.sample("garm_edge_warm_guests", {{"state", state}},
                  static_cast<std::uint64_t>(it == by_state_.end() ? 0 : it->second));
    }
  }
  text.family("garm_edge_warm_guests_total", "counter",
              "Warm guests started, bound to garm's creates, wasted (not ready in time), saved "
              "to disk and retired (settings changed, count lowered).");
  const std::pair<const char*, std::size_t> events[] = {{"started", started_.load()},
                                                        {"bound", service_.warm_bound()},
                                                        {"wasted", wasted_.load()},
                                                        {"saved", saved_.load()},
                                                        {"retired", retired_.load()}};
  for (const auto& [event, count] : events) {
    text.sample("garm_edge_warm_guests_total", {{"event", event}},
                static_cast<std::uint64_t>(count));
  }
  service_.warm_restores().render(text);
  return text.str();
}

}  // namespace garm_edge::agent
