#pragma once

#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>

#include "agent/instances/cache_generations.hpp"
#include "agent/instances/instance_store.hpp"

namespace garm_edge::agent {

/// Who may use the guest service: per instance, the hashes of its two tokens, its reserved
/// address and whether its access is still open. Kept in memory for the request path and
/// rebuilt from the records at startup.
class GuestIndex {
 public:
  struct Entry {
    std::string domain_name;
    std::string controller_id;  // whose instance (the warm controller's while warm)
    std::string seed_token_hash;
    std::string bearer_token_hash;
    std::string ip;  // the reserved address; a guest without one is never admitted
    bool closed = false;
    // What the guest reported, for GetInstance and ListInstances.
    std::string os_name;
    std::string os_version;
    std::string runner_status;
    std::string last_message;
    /// A warm guest's own token, until it has fetched its assignment.
    std::string warm_token_hash;
    /// A warm guest not bound to garm's instance yet, or a cache builder: nothing of garm's is
    /// served to it.
    bool no_garm = false;
  };

  /// Admits (or updates) `record`'s guest; a record without a guest removes its entry.
  void put(const InstanceRecord& record);
  /// From now on nothing of this instance is served or relayed.
  void remove(std::string_view domain_name);
  std::optional<Entry> get(std::string_view domain_name) const;
  /// Whether `ip` is an instance's reserved address (warm guests' and closed ones' included).
  bool holds_address(std::string_view ip) const;
  /// The controller whose instance holds `ip`; empty when none does.
  std::string controller_at(std::string_view ip) const;
  /// Every address held by an instance, reserved in the network yet or not.
  std::set<std::string> addresses() const;

  /// The open instance whose seed token hashes to `token_hash` and whose reserved address is
  /// `source_ip`. Every entry is compared in constant time, whatever matches.
  std::optional<Entry> by_seed_token(std::string_view token_hash, std::string_view source_ip) const;
  std::optional<Entry> by_bearer_token(std::string_view token_hash,
                                       std::string_view source_ip) const;
  /// The warm guest whose own token hashes to `token_hash`, at `source_ip`.
  std::optional<Entry> by_warm_token(std::string_view token_hash, std::string_view source_ip) const;
  /// The open instance whose reserved address is `source_ip`: for what the guest may fetch
  /// without a token (its runner archive, which is no secret of its own).
  std::optional<Entry> by_address(std::string_view source_ip) const;
  /// The instance whose reserved address is `source_ip`, open or closed, bound if warm: for
  /// garm-agent's socket, which lives as long as its instance.
  std::optional<Entry> instance_at(std::string_view source_ip) const;

 private:
  /// The entry whose reserved address is `source_ip` (one address is one entry).
  std::optional<Entry> at_address(std::string_view source_ip) const;
  std::optional<Entry> find(std::string Entry::*hash, std::string_view token_hash,
                            std::string_view source_ip) const;

  mutable std::mutex mutex_;
  std::map<std::string, Entry, std::less<>> entries_;
};

}  // namespace garm_edge::agent
