#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/log.hpp"
#include "hub/hub_store.hpp"

namespace garm_edge::hub {

/// The enrolled agents as the hub last read them from its state, kept by a thread of its own so
/// that no listener waits on the state (PostgreSQL may be slow, or restarting): every tick it
/// asks the state's generation, and when it moved, or every `full_check_ticks`, it rereads the
/// agents and runs `changed` on its thread; when the generation moved, it also copies the
/// database's CRL to pki/crl.pem (HubStore::sync_crl). While the state cannot be read it keeps the
/// agents it read last, and says so once in the log.
class StateWatcher {
 public:
  struct Timing {
    std::chrono::milliseconds tick{250};
    unsigned full_check_ticks = 8;
    /// How often this hub says in the state that it serves (PostgreSQL: other hubs and their
    /// agents learn of it then).
    std::chrono::seconds announce_interval{30};
    /// A hub that has not announced itself for this long is not given to agents (they keep
    /// dialing the hubs they know; one that comes back is given again).
    std::chrono::seconds hub_silent_after{std::chrono::minutes(10)};
  };

  /// `hub_url`: where agents dial this hub (hub.toml's url), announced in the state.
  StateWatcher(HubStore& store, Logger& log, Timing timing, std::string hub_url,
               std::function<void()> changed);
  ~StateWatcher();
  StateWatcher(const StateWatcher&) = delete;
  StateWatcher& operator=(const StateWatcher&) = delete;

  /// Reads the agents once (throws when the state cannot be read), then starts the thread.
  void start();
  void stop();

  /// Reads the state at once rather than at the next tick (this hub just changed it, for the
  /// operator's CLI: its own tunnels and CRL follow without waiting for a tick).
  void check_now();

  /// The agents as last read, by name.
  std::vector<AgentRecord> agents() const;
  /// As last read only: nothing when the last read did not have it.
  std::optional<AgentRecord> known(const std::string& name) const;
  /// The agent whose certificate `serial` the hub accepts now: from the last read, else asked of
  /// the state (enrolled or renewed a moment ago, perhaps at another hub). Nothing when it is
  /// not such an agent; throws when the state had to be asked and cannot be read.
  std::optional<AgentRecord> accepting(const std::string& name, const std::string& serial,
                                       UnixSeconds now);
  /// An agent this hub just enrolled or renewed: known before the next read.
  void note(const AgentRecord& agent);
  /// Where agents dial the fleet's hubs: this one first, then every other that announced itself
  /// lately, by URL, as last read.
  std::vector<std::string> hub_urls() const;

 private:
  void run();
  /// One tick: true when the agents were read again.
  bool check(bool full);
  /// The agents read, but those noted after the read began (`notes_before`) as noted.
  void replace_agents(std::vector<AgentRecord> read, std::uint64_t notes_before);
  std::uint64_t notes_made() const;
  /// On a full check: announces this hub when due, and reads the others.
  void follow_hubs();
  /// follow_hubs(), its failure logged once and kept from the agents' reads.
  void follow_hubs_safely();

  HubStore& store_;
  Logger& log_;
  Timing timing_;
  std::string hub_url_;
  std::function<void()> changed_;
  std::chrono::steady_clock::time_point next_announcement_{};  // the watcher thread's

  mutable std::mutex mutex_;
  std::map<std::string, AgentRecord> agents_;  // mutex_
  /// Noted agents with the number of their note: a read that began before a note keeps it.
  std::map<std::string, std::pair<std::uint64_t, AgentRecord>> notes_;  // mutex_
  std::uint64_t notes_made_ = 0;                                        // mutex_
  std::vector<std::string> other_hubs_;                                 // mutex_
  std::uint64_t generation_ = 0;                                        // the watcher thread's
  bool failing_ = false;       // the watcher thread's: said so in the log
  bool hubs_failing_ = false;  // the watcher thread's
  bool stopping_ = false;      // mutex_
  bool check_asked_ = false;   // mutex_
  std::condition_variable wake_;
  std::thread thread_;
};

}  // namespace garm_edge::hub
