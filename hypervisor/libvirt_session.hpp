#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "hypervisor/libvirt_support.hpp"
#include "hypervisor/tag_cache.hpp"

namespace garm_edge::hypervisor::libvirt {

using ConnectionPtr = std::shared_ptr<virConnect>;

/// The state libvirt calls share: one connection (libvirt's client is thread-safe), reopened
/// on the next call after the daemon goes away, and the tag cache its events keep honest.
/// Calls hold it by shared_ptr, so a call abandoned at its deadline can still finish safely.
class Session {
 public:
  explicit Session(std::string uri) : uri_(std::move(uri)) {}

  ConnectionPtr connection();
  /// Drops `broken` so the next call reconnects (unless another call already did).
  void forget(const ConnectionPtr& broken);
  /// Our tags of a domain, from the cache when events can keep it honest.
  std::optional<Tags> tags_of(virDomainPtr domain, const Identity& identity);

  const std::string& uri() const { return uri_; }

 private:
  ConnectionPtr open();

  std::string uri_;
  std::mutex mutex_;
  ConnectionPtr connection_;
  std::shared_ptr<std::atomic<bool>> closed_;
  std::shared_ptr<TagCache> cache_ = std::make_shared<TagCache>();
  std::atomic<bool> cache_usable_{false};
};

}  // namespace garm_edge::hypervisor::libvirt
