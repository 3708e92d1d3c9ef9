#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
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
/// open again; called from libvirt's event loop or a caller's thread, never under a lock that
/// libvirt calls take.
using ConnectionNotice = std::function<void(bool connected, const std::string& message)>;

/// The state libvirt calls share: one connection (libvirt's client is thread-safe), reopened
/// on the next call after the daemon goes away, and the tag cache its events keep honest.
/// Calls hold it by shared_ptr, so a call abandoned at its deadline can still finish safely.
class Session {
 public:
  explicit Session(std::string uri, ConnectionNotice notice = {})
      : uri_(std::move(uri)), notice_(std::move(notice)) {}
  /// Closes the connection before the members its close callback uses go away.
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  /// The open connection, or a new one (opened without holding the session's lock, so a daemon
  /// slow to accept delays only the callers that need the connection anyway).
  ConnectionPtr connection();
  /// Drops `broken` so the next call reconnects (unless another call already did).
  void forget(const ConnectionPtr& broken, const std::string& why);
  /// Holds a connection libvirt still thinks is alive (no round trip to the daemon).
  bool alive();
  /// No more notices: whoever listened is going away.
  void silence();
  /// Our tags of a domain, from the cache when events can keep it honest.
  std::optional<Tags> tags_of(virDomainPtr domain, const Identity& identity);
  /// Drops a domain's cached tags at once (its metadata-change event may come later).
  void forget_tags(const Identity& identity) { cache_->forget(identity.raw_uuid); }

  const std::string& uri() const { return uri_; }

  /// Shared with libvirt's close callback; tells which connection closed.
  struct CloseState {
    std::atomic<bool> closed{false};
    std::uint64_t generation = 0;
    std::function<void(std::uint64_t generation, int reason)> on_close;
  };

 private:
  struct Opened {
    ConnectionPtr connection;
    std::shared_ptr<CloseState> close_state;
  };
  Opened open(std::uint64_t generation);
  bool usable() const;  // with mutex_ held
  /// A loss counts only for the connection in use: a late callback of an older one is old news.
  void note_lost(std::uint64_t generation, const std::string& why);
  void note_opened();
  void notify(bool connected, const std::string& message);

  std::string uri_;
  std::mutex mutex_;  // connection_, close_state_, generation_; never held while opening
  ConnectionPtr connection_;
  std::shared_ptr<CloseState> close_state_;
  std::uint64_t generation_ = 0;
  std::atomic<std::uint64_t> next_generation_{1};
  std::shared_ptr<TagCache> cache_ = std::make_shared<TagCache>();
  std::atomic<bool> cache_usable_{false};

  std::mutex state_mutex_;  // the notes below; never held across a libvirt call
  bool lost_ = false;
  std::uint64_t lost_generation_ = 0;
  std::chrono::steady_clock::time_point lost_at_;

  std::mutex notice_mutex_;  // held while notifying, so silence() waits for a notice in flight
  ConnectionNotice notice_;
};

}  // namespace garm_edge::hypervisor::libvirt
