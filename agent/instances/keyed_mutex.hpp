#pragma once

#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

namespace garm_edge::agent {

/// One lock per key (an instance), created on first use and dropped when nobody holds or
/// waits for it, so memory does not grow with the number of instances ever seen.
class KeyedMutex {
 public:
  class Guard {
   public:
    Guard(KeyedMutex& owner, std::string key) : owner_(&owner), key_(std::move(key)) {}
    ~Guard() {
      if (owner_ != nullptr) {
        owner_->unlock(key_);
      }
    }
    Guard(Guard&& other) noexcept
        : owner_(std::exchange(other.owner_, nullptr)), key_(std::move(other.key_)) {}
    Guard(const Guard&) = delete;
    Guard& operator=(const Guard&) = delete;
    Guard& operator=(Guard&&) = delete;

   private:
    KeyedMutex* owner_;
    std::string key_;
  };

  Guard lock(const std::string& key) {
    std::unique_lock lock(mutex_);
    auto& entry = entries_[key];
    ++entry.interested;
    released_.wait(lock, [&entry] { return !entry.held; });
    entry.held = true;
    return Guard(*this, key);
  }

  /// Nothing when another caller holds the key.
  std::optional<Guard> try_lock(const std::string& key) {
    std::lock_guard lock(mutex_);
    auto& entry = entries_[key];
    if (entry.held) {
      return std::nullopt;
    }
    ++entry.interested;
    entry.held = true;
    return Guard(*this, key);
  }

 private:
  struct Entry {
    bool held = false;
    unsigned interested = 0;
  };

  void unlock(const std::string& key) {
    {
      std::lock_guard lock(mutex_);
      auto it = entries_.find(key);
      it->second.held = false;
      if (--it->second.interested == 0) {
        entries_.erase(it);
      }
    }
    released_.notify_all();
  }

  std::mutex mutex_;
  std::condition_variable released_;
  std::map<std::string, Entry> entries_;
};

}  // namespace garm_edge::agent
