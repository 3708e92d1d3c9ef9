#pragma once

#include <mutex>

#include "agent/guests/agent_sockets.hpp"
#include "agent/guests/guest_access.hpp"
#include "agent/guests/guest_index.hpp"
#include "agent/instances/guest_side.hpp"
#include "agent/runner_archives/archive_cache.hpp"

namespace garm_edge::agent {

/// The guest side of an agent with `[guests]`: host resources through GuestAccess, request
/// admission through GuestIndex.
class GuestAttachments final : public GuestSide {
 public:
  /// `archives` (may be null: no cache) starts each new guest's runner archive download at
  /// create, so it is ready by the time the guest has booted. `sockets` (may be null) are
  /// the agent sockets relayed for guests: revoke() ends an instance's.
  GuestAttachments(GuestAccess& access, GuestIndex& index, RunnerArchiveCache* archives,
                   AgentSockets* sockets = nullptr)
      : access_(access), index_(index), archives_(archives), sockets_(sockets) {}

  bool enabled() const override { return true; }
  std::optional<GuestPlan> plan(const InstanceRecord& record,
                                const wire::BootstrapInstance& bootstrap) override;
  GuestBinding bind(const InstanceRecord& warm, const wire::BootstrapInstance& bootstrap) override;
  void assign_address(GuestPlan& plan,
                      const std::function<InstanceRecord(const GuestPlan&)>& persist) override;
  std::optional<AddressCount> addresses() override;
  void reserve(const GuestRecord& guest) override;
  void admit(const InstanceRecord& record) override;
  void revoke(std::string_view domain_name) override;
  void release(const GuestRecord& guest) override;
  std::size_t release_unheld(const std::function<std::set<std::string>()>& recorded) override;
  std::optional<GuestView> view(std::string_view domain_name) const override;

 private:
  GuestAccess& access_;
  GuestIndex& index_;
  RunnerArchiveCache* archives_;
  AgentSockets* sockets_;
  /// Held from choosing an address until the instance holding it is recorded and admitted.
  std::mutex address_mutex_;
};

}  // namespace garm_edge::agent
