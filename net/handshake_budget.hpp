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

namespace garm_edge::net {

/// The slots for connections that have not yet shown a certificate. While slots are free,
/// anyone may take them: a burst of real clients from one address (garm starting fifty provider
/// processes at once) is never cut. Anyone can open a TCP connection, so a full budget does not
/// simply refuse the newcomer (silent connections held open would then lock every client out):
/// it evicts the oldest handshake whose ClientHello has not arrived yet, from the newcomer's own
/// address when that address holds its share. A real client sends its ClientHello at once, so a
/// flood of silent or reopened connections only ever displaces its own kind. With no silent
/// handshake left, an address holding more than its share loses its oldest stalled handshake
/// (a ClientHello, then nothing for `stalled_after`) to a newcomer from elsewhere: a client that
/// sends ClientHellos and stalls cannot hold every slot, and a real handshake, which finishes in
/// milliseconds, is never cut. Only when neither exists is the newcomer refused.
class HandshakeBudget {
 public:
  struct Limits {
    std::size_t total = 64;
    std::size_t per_peer = 16;
    std::chrono::milliseconds stalled_after{std::chrono::seconds(2)};
  };
  using Clock = std::chrono::steady_clock;
  using Ticket = std::uint64_t;
  using Evict = std::function<void()>;

  explicit HandshakeBudget(Limits limits) : limits_(limits) {}

  /// Takes a slot for a handshake from `peer`, or nothing when every slot it could take holds a
  /// handshake under way. `evict` runs (under no lock of ours) if this handshake is later
  /// evicted to make room for another.
  std::optional<Ticket> admit(const std::string& peer, Evict evict,
                              Clock::time_point now = Clock::now());
  /// The connection's ClientHello arrived: it is no longer evicted for newcomers (unless it
  /// stalls while its address holds more than its share).
  void progressed(Ticket ticket, Clock::time_point now = Clock::now());
  /// Handshake done or connection closed: the slot is free (no-op when already evicted).
  void release(Ticket ticket);

  std::size_t size() const;
  std::uint64_t evictions() const;

 private:
  struct Entry {
    Ticket ticket;
    std::string peer;
    bool progressed = false;
    Evict evict;
    Clock::time_point progressed_at{};
  };
  using Entries = std::list<Entry>;  // oldest first

  /// The oldest entry without progress among `peer`'s (or everyone's, when `peer` is null).
  Entries::iterator victim(const std::string* peer);
  Entries::iterator find(Ticket ticket);
  Evict remove(Entries::iterator entry);
  /// The handshake to evict for a newcomer from `peer` when the budget is full, if any.
  Entries::iterator room_for(const std::string& peer, Clock::time_point now);
  /// The oldest stalled handshake of an address holding more than its share.
  Entries::iterator oldest_stalled_over_share(Clock::time_point now);

  Limits limits_;
  mutable std::mutex mutex_;
  Entries entries_;
  std::map<std::string, std::size_t> per_peer_;
  Ticket next_ = 1;
  std::uint64_t evictions_ = 0;
};

}  // namespace garm_edge::net
