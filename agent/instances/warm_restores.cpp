#include "agent/instances/warm_restores.hpp"

namespace garm_edge::agent {

std::string_view to_string(RestoreFallback reason) {
  switch (reason) {
    case RestoreFallback::missing_state:
      return "missing_state";
    case RestoreFallback::restore_failed:
      return "restore_failed";
    case RestoreFallback::not_running:
      return "not_running";
  }
  return "unknown";
}

WarmRestores::WarmRestores() : seconds_({0.25, 0.5, 1, 2, 5, 10, 30, 60}) {}

void WarmRestores::restored(double seconds) {
  std::lock_guard lock(mutex_);
  seconds_.observe(seconds);
}

void WarmRestores::fell_back(RestoreFallback reason) {
  std::lock_guard lock(mutex_);
  ++fallbacks_[static_cast<std::size_t>(reason)];
}

std::uint64_t WarmRestores::fallbacks(RestoreFallback reason) const {
  std::lock_guard lock(mutex_);
  return fallbacks_[static_cast<std::size_t>(reason)];
}

void WarmRestores::render(PrometheusText& text) const {
  std::lock_guard lock(mutex_);
  text.family("garm_edge_warm_restore_seconds", "histogram",
              "Seconds to restore a saved warm guest taken by garm's create.");
  seconds_.render(text, "garm_edge_warm_restore_seconds", {});
  text.family("garm_edge_warm_restore_fallbacks_total", "counter",
              "Creates that took a saved warm guest which could not be restored (it was removed "
              "and the create went cold), by reason.");
  for (const auto reason : kReasons) {
    text.sample("garm_edge_warm_restore_fallbacks_total", {{"reason", to_string(reason)}},
                fallbacks_[static_cast<std::size_t>(reason)]);
  }
}

}  // namespace garm_edge::agent
