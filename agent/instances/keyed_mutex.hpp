#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
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

  /// Runs `work` under the key's lock at once when nobody holds the key; otherwise hands it to
  /// the holder, who runs it, still holding the key, as it lets go. For short edits that must
  /// not wait behind a long operation (a guest's report during a 30 s graceful stop). `work`
  /// must not lock the key itself, must capture by value, and must not throw. A key keeps at
  /// most kMaxDeferred; past that its oldest is dropped and counted.
  void run_or_defer(const std::string& key, std::function<void()> work) {
    {
      std::lock_guard lock(mutex_);
      auto& entry = entries_[key];
      if (entry.held) {
        if (entry.deferred.size() >= kMaxDeferred) {
          entry.deferred.pop_front();
          ++dropped_;
        }
        entry.deferred.push_back(std::move(work));
        return;
      }
      ++entry.interested;
      entry.held = true;
    }
    Guard guard(*this, key);
    run_quietly(work);
  }
  /// Deferred work dropped because its key had kMaxDeferred waiting.
  std::size_t dropped() const {
    std::lock_guard lock(mutex_);
    return dropped_;
  }
  static constexpr std::size_t kMaxDeferred = 32;
  /// Deferred work one holder runs as it lets go, at most.
  static constexpr std::size_t kMaxDrained = 4 * kMaxDeferred;

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
    std::deque<std::function<void()>> deferred;  // run by the holder before it lets go
  };

  static void run_quietly(const std::function<void()>& work) noexcept {
    try {
      work();
    } catch (...) {
      // deferred work answers nobody: its failure must not end the holder's operation
    }
  }

  void unlock(const std::string& key) {
    // Work handed over while the holder drains is drained too, but only so much: a stream of
    // it must not keep the holder from its own caller. The rest is dropped and counted.
    std::size_t ran = 0;
    for (;;) {
      std::deque<std::function<void()>> work;
      {
        std::lock_guard lock(mutex_);
        auto it = entries_.find(key);
        if (ran >= kMaxDrained) {
          dropped_ += it->second.deferred.size();
          it->second.deferred.clear();
        }
        if (it->second.deferred.empty()) {
          it->second.held = false;
          if (--it->second.interested == 0) {
            entries_.erase(it);
          }
          break;
        }
        work.swap(it->second.deferred);
      }
      for (const auto& item : work) {
        run_quietly(item);
      }
      ran += work.size();
    }
    released_.notify_all();
  }

  mutable std::mutex mutex_;
  std::condition_variable released_;
  std::map<std::string, Entry> entries_;
  std::size_t dropped_ = 0;
};

}  // namespace garm_edge::agent

namespace garm_edge::agent {

/// Which keys (instances) were deleted after a given moment, so that a create that began
/// before a delete of its name does not carry on after it: garm cuts a create off at its
/// timeout and deletes the name at once, possibly before the create has even taken the
/// instance's lock. Moments are a counter, not a clock. Bounded: past 4096 keys the older
/// half is forgotten (a create would have to wait behind that many deletes to miss one).
class DeleteMarks {
 public:
  using Moment = std::uint64_t;

  Moment now() const {
    std::lock_guard lock(mutex_);
    return counter_;
  }
  void mark(const std::string& key) {
    std::lock_guard lock(mutex_);
    if (marks_.size() >= kMaxKeys) {
      forget_older_half();
    }
    marks_[key] = ++counter_;
  }
  /// Whether `key` was deleted after `moment`.
  bool deleted_since(const std::string& key, Moment moment) const {
    std::lock_guard lock(mutex_);
    const auto it = marks_.find(key);
    return it != marks_.end() && it->second > moment;
  }

 private:
  static constexpr std::size_t kMaxKeys = 4096;

  void forget_older_half() {
    const auto cut = counter_ - kMaxKeys / 2;
    std::erase_if(marks_, [cut](const auto& entry) { return entry.second <= cut; });
  }

  mutable std::mutex mutex_;
  Moment counter_ = 0;
  std::map<std::string, Moment> marks_;
};

}  // namespace garm_edge::agent
