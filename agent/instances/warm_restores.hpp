#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <string_view>

#include "common/prometheus_text.hpp"

namespace garm_edge::agent {

/// Why a create that took a saved warm guest went cold instead (docs/warm-guests.md).
enum class RestoreFallback {
  missing_state,   // its memory file is gone
  restore_failed,  // libvirt or QEMU refused it: damaged, another QEMU's, out of memory
  not_running,     // restored, yet its domain does not run
};
std::string_view to_string(RestoreFallback reason);

/// Restores of saved warm guests: how long each took, and the ones that fell back to a cold
/// create, by reason. Thread-safe.
class WarmRestores {
 public:
  WarmRestores();
  void restored(double seconds);
  void fell_back(RestoreFallback reason);
  std::uint64_t fallbacks(RestoreFallback reason) const;
  /// garm_edge_warm_restore_seconds and garm_edge_warm_restore_fallbacks_total.
  void render(PrometheusText& text) const;

 private:
  static constexpr std::array kReasons{RestoreFallback::missing_state,
                                       RestoreFallback::restore_failed,
                                       RestoreFallback::not_running};
  mutable std::mutex mutex_;
  Histogram seconds_;
  std::array<std::uint64_t, kReasons.size()> fallbacks_{};
};

}  // namespace garm_edge::agent
