#pragma once

#include <chrono>
#include <cstddef>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "common/unique_fd.hpp"

namespace garm_edge::provider {

/// A delete garm asked for that an agent could not be reached to carry out. garm forgets the
/// instance once DeleteInstance exits 0, so what that agent may still hold is kept here until
/// a later call of the provider reaches it.
struct DeferredDelete {
  std::string controller;
  std::string agent;
  std::string ref;  // what the agent knows the instance by: its UUID or garm's name
  std::string url;  // the agent's URL when it was kept (status shows it)
  std::chrono::system_clock::time_point recorded_at;
  std::string reason;  // why the agent could not be asked
};

/// The deferred deletes of one provider config, one file each under
/// `<session_dir>/deferred-deletes/<controller>/<agent>/`, so that provider processes that run
/// at once (garm runs them in parallel) never rewrite each other's entries.
class DeferredDeletes {
 public:
  /// Beyond this many entries for one agent a delete is refused instead (garm retries it).
  static constexpr std::size_t kMaxPerAgent = 4096;
  /// The longest ref a file name can carry: hex-encoded, and with a temp file's suffix, within
  /// the 255 bytes of a file name.
  static constexpr std::size_t kMaxRefLength = 100;

  explicit DeferredDeletes(const std::filesystem::path& session_dir);

  /// Written and synced before it returns; throws DurableFileError when it cannot be kept
  /// (garm must then keep retrying: the delete is not done).
  void record(const DeferredDelete& entry);

  /// Up to `limit` entries of `controller` for `agent`, oldest first.
  std::vector<DeferredDelete> pending(const std::string& controller, const std::string& agent,
                                      std::size_t limit = kMaxPerAgent) const;

  /// Whether `controller` has any entry at all: one directory read, so that a call with
  /// nothing kept (the usual case) starts no work for it.
  bool any_pending(const std::string& controller) const;

  /// Every entry, of every controller, oldest first (for `status`); unreadable files are skipped.
  std::vector<DeferredDelete> all() const;

  /// An entry held with an exclusive flock: a delete being carried out, or a create of the same
  /// name (garm retries a failed create under its name once the delete exits 0). Released when
  /// it goes away.
  class Held {
   public:
    Held(Held&&) noexcept = default;
    Held& operator=(Held&&) = delete;
    ~Held();
    const DeferredDelete& entry() const { return entry_; }

   private:
    friend class DeferredDeletes;
    Held(DeferredDelete entry, int fd) : entry_(std::move(entry)), fd_(fd) {}
    DeferredDelete entry_;
    UniqueFd fd_;
  };

  /// The entry, held, unless another process holds it or it is gone meanwhile.
  std::optional<Held> try_hold(const DeferredDelete& entry) const;

  /// Every entry for `ref` of `controller`, whatever its agent, held; waits up to `patience` for
  /// one another process holds (a delete of it is at most a probe deadline long). `complete` is
  /// false when one could not be held in that time.
  struct HeldEntries {
    std::vector<Held> held;
    bool complete = true;
  };
  HeldEntries hold_all(const std::string& controller, const std::string& ref,
                       std::chrono::milliseconds patience) const;

  /// Removes the held entry: its agent answered that the instance is gone, or garm created the
  /// name again on that agent.
  void forget(const Held& held);

 private:
  std::filesystem::path agent_directory(const std::string& controller,
                                        const std::string& agent) const;
  std::filesystem::path root_;
};

}  // namespace garm_edge::provider
