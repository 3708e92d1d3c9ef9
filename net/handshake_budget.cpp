#include "net/handshake_budget.hpp"

#include <algorithm>
#include <vector>

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

std::optional<HandshakeBudget::Ticket> HandshakeBudget::admit(const std::string& peer,
                                                              Evict evict) {
  std::vector<Evict> evicted;
  std::optional<Ticket> ticket;
  {
    std::lock_guard lock(mutex_);
    const auto make_room = [&](const std::string* among) {
      const auto entry = victim(among);
      if (entry == entries_.end()) {
        return false;
      }
      evicted.push_back(remove(entry));
      return true;
    };
    const auto held = per_peer_.find(peer);
    const bool peer_full = held != per_peer_.end() && held->second >= limits_.per_peer;
    if ((!peer_full || make_room(&peer)) &&
        (entries_.size() < limits_.total || make_room(nullptr))) {
      ticket = next_++;
      entries_.push_back(
          Entry{.ticket = *ticket, .peer = peer, .progressed = false, .evict = std::move(evict)});
      ++per_peer_[peer];
    }
    evictions_ += evicted.size();
  }
  for (auto& run : evicted) {
    try {
      if (run) {
        run();
      }
    } catch (...) {
      // the victim stays open until its own deadline; the budget no longer counts it
    }
  }
  return ticket;
}

void HandshakeBudget::progressed(Ticket ticket) {
  std::lock_guard lock(mutex_);
  if (const auto entry = find(ticket); entry != entries_.end()) {
    entry->progressed = true;
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
