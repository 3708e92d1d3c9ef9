#include "net/handshake_budget.hpp"

#include <algorithm>
#include <vector>

namespace garm_edge::net {

HandshakeBudget::Entries::iterator HandshakeBudget::victim(const std::string* peer) {
  auto oldest = entries_.end();
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (peer != nullptr && it->peer != *peer) {
      continue;
    }
    if (!it->spoke) {
      return it;
    }
    if (oldest == entries_.end()) {
      oldest = it;
    }
  }
  return oldest;
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

HandshakeBudget::Ticket HandshakeBudget::admit(const std::string& peer, Evict evict) {
  std::vector<Evict> evicted;
  Ticket ticket = 0;
  {
    std::lock_guard lock(mutex_);
    const auto held = per_peer_.find(peer);
    if (held != per_peer_.end() && held->second >= limits_.per_peer) {
      evicted.push_back(remove(victim(&peer)));
    }
    while (!entries_.empty() && entries_.size() >= limits_.total) {
      evicted.push_back(remove(victim(nullptr)));
    }
    evictions_ += evicted.size();
    ticket = next_++;
    entries_.push_back(
        Entry{.ticket = ticket, .peer = peer, .spoke = false, .evict = std::move(evict)});
    ++per_peer_[peer];
  }
  for (auto& run : evicted) {
    if (run) {
      run();
    }
  }
  return ticket;
}

void HandshakeBudget::spoke(Ticket ticket) {
  std::lock_guard lock(mutex_);
  if (const auto entry = find(ticket); entry != entries_.end()) {
    entry->spoke = true;
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
