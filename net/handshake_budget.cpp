#include "net/handshake_budget.hpp"

#include <algorithm>

namespace garm_edge::net {

HandshakeBudget::Entries::iterator HandshakeBudget::victim(const std::string* peer) {
  return std::find_if(entries_.begin(), entries_.end(), [peer](const Entry& entry) {
    return !entry.progressed && (peer == nullptr || entry.peer == *peer);
  });
}

HandshakeBudget::Entries::iterator HandshakeBudget::find(Ticket ticket) {
  return std::find_if(entries_.begin(), entries_.end(),
                      [ticket](const Entry& entry) { return entry.ticket == ticket; });
}

HandshakeBudget::Evict HandshakeBudget::remove(Entries::iterator entry) {
  auto count = per_peer_.find(entry->peer);
  if (--count->second == 0) {
    per_peer_.erase(count);
  }
  auto evict = std::move(entry->evict);
  entries_.erase(entry);
  return evict;
}

HandshakeBudget::Entries::iterator HandshakeBudget::oldest_stalled_over_share(
    Clock::time_point now) {
  return std::find_if(entries_.begin(), entries_.end(), [this, now](const Entry& entry) {
    return entry.progressed && now - entry.progressed_at >= limits_.stalled_after &&
           per_peer_.at(entry.peer) > limits_.per_peer;
  });
}

HandshakeBudget::Entries::iterator HandshakeBudget::room_for(const std::string& peer,
                                                             Clock::time_point now) {
  const auto held = per_peer_.find(peer);
  if (held != per_peer_.end() && held->second >= limits_.per_peer) {
    return victim(&peer);  // over its share: only its own silent ones make room for it
  }
  const auto silent = victim(nullptr);
  return silent != entries_.end() ? silent : oldest_stalled_over_share(now);
}

std::optional<HandshakeBudget::Ticket> HandshakeBudget::admit(const std::string& peer, Evict evict,
                                                              Clock::time_point now) {
  Evict evicted;
  std::optional<Ticket> ticket;
  {
    std::lock_guard lock(mutex_);
    if (entries_.size() >= limits_.total) {
      const auto entry = room_for(peer, now);
      if (entry == entries_.end()) {
        return std::nullopt;
      }
      evicted = remove(entry);
      ++evictions_;
    }
    ticket = next_++;
    entries_.push_back(
        Entry{.ticket = *ticket, .peer = peer, .progressed = false, .evict = std::move(evict)});
    ++per_peer_[peer];
  }
  try {
    if (evicted) {
      evicted();
    }
  } catch (...) {
    // the victim stays open until its own deadline; the budget no longer counts it
  }
  return ticket;
}

void HandshakeBudget::progressed(Ticket ticket, Clock::time_point now) {
  std::lock_guard lock(mutex_);
  if (const auto entry = find(ticket); entry != entries_.end()) {
    entry->progressed = true;
    entry->progressed_at = now;
  }
}

void HandshakeBudget::release(Ticket ticket) {
  Evict dropped;  // destroyed outside the lock: it may hold the last reference to a connection
  std::lock_guard lock(mutex_);
  if (const auto entry = find(ticket); entry != entries_.end()) {
    dropped = remove(entry);
  }
}

std::size_t HandshakeBudget::size() const {
  std::lock_guard lock(mutex_);
  return entries_.size();
}

std::uint64_t HandshakeBudget::evictions() const {
  std::lock_guard lock(mutex_);
  return evictions_;
}

}  // namespace garm_edge::net
