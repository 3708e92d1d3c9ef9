#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "hypervisor/hypervisor.hpp"

namespace garm_edge::hypervisor {

/// The tags of each domain by UUID, so listing does not read every domain's metadata on every
/// call. Entries are dropped on libvirt's metadata-change, define and undefine events, and the
/// whole cache is dropped when the connection is reopened (events may have been missed).
/// "No metadata of ours" is cached too, so foreign domains cost nothing after the first read.
class TagCache {
 public:
  /// Outer optional: a cache miss. Inner: the domain has no tags of ours.
  std::optional<std::optional<Tags>> find(const std::string& uuid, const std::string& name) const {
    std::lock_guard lock(mutex_);
    const auto it = entries_.find(uuid);
    if (it == entries_.end() || it->second.name != name) {
      return std::nullopt;
    }
    return it->second.tags;
  }

  /// Taken before reading a domain's metadata and handed to `store`: an invalidation that
  /// lands between the read and the store must win over the (possibly stale) read.
  std::uint64_t epoch() const {
    std::lock_guard lock(mutex_);
    return epoch_;
  }

  void store(const std::string& uuid, const std::string& name, std::optional<Tags> tags,
             std::uint64_t read_at_epoch) {
    std::lock_guard lock(mutex_);
    if (read_at_epoch == epoch_) {
      entries_[uuid] = Entry{name, std::move(tags)};
    }
  }

  void forget(const std::string& uuid) {
    std::lock_guard lock(mutex_);
    ++epoch_;
    entries_.erase(uuid);
  }

  void clear() {
    std::lock_guard lock(mutex_);
    ++epoch_;
    entries_.clear();
  }

 private:
  struct Entry {
    std::string name;
    std::optional<Tags> tags;
  };

  mutable std::mutex mutex_;
  std::uint64_t epoch_ = 0;
  std::unordered_map<std::string, Entry> entries_;
};

}  // namespace garm_edge::hypervisor
