#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

namespace garm_edge::net {

/// A fixed number of slots that keys (client addresses, certificate identities) share, so that
/// no key can keep another below its share. While slots are free anyone may take them: a burst
/// from one key (garm starting fifty provider processes at once) is never cut. When they are
/// full, a newcomer takes the slot of
///  1. the evictable entry that has gone longest without progress, once that is
///     `stalled_after` or more, whatever its key: a connection that stalls (a silent socket, a
///     ClientHello and then nothing, a keep-alive left idle) loses to one that moves;
///  2. otherwise, the least recently progressed evictable entry of the key holding the most
///     slots, when that key holds at least two more than the newcomer's key (so the two never
///     just swap places): four addresses holding sixteen fresh handshakes each cannot keep a
///     fifth from its first;
///  3. otherwise nobody's: the newcomer is refused, since every slot holds live work of a key
///     at or under the newcomer's share.
/// Only entries marked evictable are ever taken (an API connection is, while it waits between
/// requests; never while a request of its runs).
class FairShare {
 public:
  struct Limits {
    std::size_t total = 64;
    std::chrono::milliseconds stalled_after{std::chrono::seconds(2)};
  };
  using Clock = std::chrono::steady_clock;
  using Ticket = std::uint64_t;
  using Evict = std::function<void()>;

  explicit FairShare(Limits limits) : limits_(limits) {}

  /// Takes a slot for `key`, or nothing when no slot may be taken for it. `evict` runs (under
  /// no lock of ours) if this entry is later evicted to make room for another.
  std::optional<Ticket> admit(const std::string& key, Evict evict,
                              Clock::time_point now = Clock::now());
  /// The entry moved on (a handshake step, a request): its stall clock starts again.
  void progressed(Ticket ticket, Clock::time_point now = Clock::now());
  /// Whether the entry may be taken for a newcomer (entries start evictable).
  void set_evictable(Ticket ticket, bool evictable);
  /// The entry is done: its slot is free (no-op when already evicted or released).
  void release(Ticket ticket);

  std::size_t size() const;
  std::size_t held_by(const std::string& key) const;
  std::uint64_t evictions() const;

 private:
  struct Entry {
    Ticket ticket;
    std::string key;
    Clock::time_point progressed_at;
    bool evictable = true;
    Evict evict;
  };
  using Entries = std::list<Entry>;

  Entries::iterator find(Ticket ticket);
  std::size_t count_of(const std::string& key) const;
  Evict remove(Entries::iterator entry);
  /// The entry to evict for a newcomer of `key` when every slot is taken, if any.
  Entries::iterator room_for(const std::string& key, Clock::time_point now);
  Entries::iterator longest_stalled(Clock::time_point now);
  Entries::iterator from_largest_holder_above(std::size_t held);

  Limits limits_;
  mutable std::mutex mutex_;
  Entries entries_;
  std::unordered_map<Ticket, Entries::iterator> index_;
  std::map<std::string, std::size_t> held_;
  Ticket next_ = 1;
  std::uint64_t evictions_ = 0;
};

}  // namespace garm_edge::net
