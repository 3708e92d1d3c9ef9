#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "hypervisor/libvirt_support.hpp"
#include "hypervisor/tag_cache.hpp"

namespace garm_edge::hypervisor::libvirt {

using ConnectionPtr = std::shared_ptr<virConnect>;

/// Told when the connection to libvirt is lost (`connected` false, with why) and when it is
/// open again; called from libvirt's event loop or a caller's thread, never under a lock.
using ConnectionNotice = std::function<void(bool connected, const std::string& message)>;

/// The state libvirt calls share: one connection (libvirt's client is thread-safe), reopened
/// on the next call after the daemon goes away, and the tag cache its events keep honest.
/// Calls hold it by shared_ptr, so a call abandoned at its deadline can still finish safely.
class Session {
 public:
  explicit Session(std::string uri, ConnectionNotice notice = {})
      : uri_(std::move(uri)), notice_(std::move(notice)) {}
  /// Closes the connection before the members its close callback uses go away.
  ~Session() { connection_.reset(); }
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  ConnectionPtr connection();
  /// Drops `broken` so the next call reconnects (unless another call already did).
  void forget(const ConnectionPtr& broken, const std::string& why);
  /// Holds a connection libvirt still thinks is alive (no round trip to the daemon).
  bool alive();
  /// Why the last attempt to open a connection failed, if it did.
  std::string last_error() const;
  /// Our tags of a domain, from the cache when events can keep it honest.
  std::optional<Tags> tags_of(virDomainPtr domain, const Identity& identity);

  const std::string& uri() const { return uri_; }

  /// Shared with libvirt's close callback, which may run after the session let go.
  struct CloseState {
    std::atomic<bool> closed{false};
    std::function<void(int reason)> on_close;
  };

 private:
  ConnectionPtr open();
  void note_lost(const std::string& why);
  void note_opened();
  void note_failed(const std::string& why);

  std::string uri_;
  ConnectionNotice notice_;
  std::mutex mutex_;  // held while opening: never taken by libvirt's event loop
  ConnectionPtr connection_;
  std::shared_ptr<CloseState> closed_;
  std::shared_ptr<TagCache> cache_ = std::make_shared<TagCache>();
  std::atomic<bool> cache_usable_{false};

  mutable std::mutex state_mutex_;  // the notes below; never held across a libvirt call
  bool lost_ = false;
  std::chrono::steady_clock::time_point lost_at_;
  std::string last_error_;
};

}  // namespace garm_edge::hypervisor::libvirt
