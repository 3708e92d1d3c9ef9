#include "net/fair_share.hpp"

#include <iterator>

namespace garm_edge::net {

FairShare::Entries::iterator FairShare::find(Ticket ticket) {
  const auto found = index_.find(ticket);
  return found == index_.end() ? entries_.end() : found->second;
}

std::size_t FairShare::count_of(const std::string& key) const {
  const auto held = held_.find(key);
  return held == held_.end() ? 0 : held->second;
}

FairShare::Evict FairShare::remove(Entries::iterator entry) {
  auto count = held_.find(entry->key);
  if (--count->second == 0) {
    held_.erase(count);
  }
  auto evict = std::move(entry->evict);
  index_.erase(entry->ticket);
  entries_.erase(entry);
  return evict;
}

FairShare::Entries::iterator FairShare::longest_stalled(Clock::time_point now) {
  auto chosen = entries_.end();
  for (auto entry = entries_.begin(); entry != entries_.end(); ++entry) {
    if (entry->evictable && now - entry->progressed_at >= limits_.stalled_after &&
        (chosen == entries_.end() || entry->progressed_at < chosen->progressed_at)) {
      chosen = entry;
    }
  }
  return chosen;
}

FairShare::Entries::iterator FairShare::from_largest_holder_above(std::size_t held) {
  // Above held + 1: taking from a key that holds one more than the newcomer would only swap
  // their places, so the victim keeps at least what the newcomer then holds.
  auto chosen = entries_.end();
  std::size_t chosen_held = held + 1;
  for (auto entry = entries_.begin(); entry != entries_.end(); ++entry) {
    if (!entry->evictable) {
      continue;
    }
    const auto entry_held = held_.at(entry->key);
    if (entry_held > chosen_held || (entry_held == chosen_held && chosen != entries_.end() &&
                                     entry->progressed_at < chosen->progressed_at)) {
      chosen = entry;
      chosen_held = entry_held;
    }
  }
  return chosen;
}

FairShare::Entries::iterator FairShare::room_for(const std::string& key, Clock::time_point now) {
  if (const auto stalled = longest_stalled(now); stalled != entries_.end()) {
    return stalled;
  }
  return from_largest_holder_above(count_of(key));
}

std::optional<FairShare::Ticket> FairShare::admit(const std::string& key, Evict evict,
                                                  Clock::time_point now) {
  Evict evicted;
  Ticket ticket = 0;
  {
    std::lock_guard lock(mutex_);
    if (entries_.size() >= limits_.total) {
      const auto entry = room_for(key, now);
      if (entry == entries_.end()) {
        return std::nullopt;
      }
      evicted = remove(entry);
      ++evictions_;
    }
    ticket = next_++;
    entries_.push_back(Entry{.ticket = ticket,
                             .key = key,
                             .progressed_at = now,
                             .evictable = true,
                             .evict = std::move(evict)});
    index_.emplace(ticket, std::prev(entries_.end()));
    ++held_[key];
  }
  try {
    if (evicted) {
      evicted();
    }
  } catch (...) {
    // the victim stays open until its own deadline; the share no longer counts it
  }
  return ticket;
}

void FairShare::progressed(Ticket ticket, Clock::time_point now) {
  std::lock_guard lock(mutex_);
  if (const auto entry = find(ticket); entry != entries_.end()) {
    entry->progressed_at = now;
  }
}

void FairShare::set_evictable(Ticket ticket, bool evictable) {
  std::lock_guard lock(mutex_);
  if (const auto entry = find(ticket); entry != entries_.end()) {
    entry->evictable = evictable;
  }
}

void FairShare::release(Ticket ticket) {
  Evict dropped;  // destroyed outside the lock: it may hold the last reference to a connection
  std::lock_guard lock(mutex_);
  if (const auto entry = find(ticket); entry != entries_.end()) {
    dropped = remove(entry);
  }
}

std::size_t FairShare::size() const {
  std::lock_guard lock(mutex_);
  return entries_.size();
}

std::size_t FairShare::held_by(const std::string& key) const {
  std::lock_guard lock(mutex_);
  return count_of(key);
}

std::uint64_t FairShare::evictions() const {
  std::lock_guard lock(mutex_);
  return evictions_;
}

}  // namespace garm_edge::net
