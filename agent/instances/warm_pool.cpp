#include "agent/instances/warm_pool.hpp"

#include <algorithm>

#include "agent/instances/warm_spec.hpp"
#include "common/prometheus_text.hpp"

namespace garm_edge::agent {
namespace {

constexpr auto kBackoff = std::chrono::seconds(30);

}  // namespace

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
    std::map<std::string, std::size_t> alive;  // by spec: warming or ready
    std::map<std::string, std::size_t> states;
    const auto now = clock_.now();
    auto guests = service_.warm_guests();
    // Ready before warming, then oldest first: beyond the count, the least useful go.
    std::sort(guests.begin(), guests.end(), [](const auto& a, const auto& b) {
      const bool a_ready = a.warm->state == WarmState::ready;
      const bool b_ready = b.warm->state == WarmState::ready;
      return a_ready != b_ready ? a_ready : a.created_at < b.created_at;
    });
    for (const auto& guest : guests) {
      const auto entry = by_spec.find(guest.warm->spec);
      const auto created = parse_rfc3339(guest.created_at);
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
      } else if (alive[guest.warm->spec] >= entry->second->count) {
        pass.retired += retire(guest, "more warm guests than [[warm]] count", pass) ? 1U : 0U;
      } else if (!runs(guest)) {
        // Shut off (a host reboot, a guest that powered itself off) or gone: it would never
        // be bound, and it holds its share of the host.
        pass.retired += retire(guest, "its domain is not running", pass) ? 1U : 0U;
      } else {
        ++alive[guest.warm->spec];
        ++states[std::string(to_string(guest.warm->state))];
      }
    }
    for (const auto& [spec, warm] : by_spec) {
      if (alive[spec] < warm->count && now >= backoff_until_[spec]) {
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
  return pass;
}

std::string WarmPool::render_metrics() const {
  PrometheusText text;
  text.family("garm_edge_warm_guests", "gauge", "Warm guests by state, as of the last pass.");
  {
    std::lock_guard lock(mutex_);
    for (const char* state : {"warming", "ready"}) {
      const auto it = by_state_.find(state);
      text.sample("garm_edge_warm_guests", {{"state", state}},
                  static_cast<std::uint64_t>(it == by_state_.end() ? 0 : it->second));
    }
  }
  text.family("garm_edge_warm_guests_total", "counter",
              "Warm guests started, bound to garm's creates, wasted (not ready in time) and "
              "retired (settings changed, count lowered).");
  const std::pair<const char*, std::size_t> events[] = {{"started", started_.load()},
                                                        {"bound", service_.warm_bound()},
                                                        {"wasted", wasted_.load()},
                                                        {"retired", retired_.load()}};
  for (const auto& [event, count] : events) {
    text.sample("garm_edge_warm_guests_total", {{"event", event}},
                static_cast<std::uint64_t>(count));
  }
  return text.str();
}

}  // namespace garm_edge::agent
