#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <string_view>

#include "agent/instances/capacity.hpp"
#include "agent/instances/instance_store.hpp"
#include "hypervisor/hypervisor.hpp"
#include "wire/bootstrap.hpp"

namespace garm_edge::agent {

/// What a new guest gets so it can reach the agent: an address reserved for its MAC, an
/// anti-spoofing filter on its interface, a seed URL with an unguessable token in its SMBIOS
/// serial, and its rendered seed.
struct GuestPlan {
  GuestRecord record;
  std::string smbios_serial;
  hypervisor::NetworkInterface interface;
};

/// A warm guest made garm's instance: its guest record as a cold create of garm's bootstrap
/// would have made it (garm's URLs, token and CA bundle, the runner archive), keeping its
/// address, MAC and seed token; and the assignment script it runs.
struct GuestBinding {
  GuestRecord guest;
  std::string assignment;
};

/// What the guest side knows of an instance, for GetInstance and ListInstances.
struct GuestView {
  std::string ip;  // the reserved address
  std::string os_name;
  std::string os_version;
  std::string runner_status;
  std::string last_message;
};

/// The guest side as the instance lifecycle sees it: the one interface between
/// `agent/instances` and `agent/guests` (which implements it). The guest side sits above: it
/// reads instance records and edits their guest part through InstanceService::update_guest.
class GuestSide {
 public:
  virtual ~GuestSide() = default;

  /// False for NoGuests: instances get no address, seed or relay.
  virtual bool enabled() const = 0;
  /// Everything the guest needs but its address; nothing when guests are not served. Throws
  /// userdata::UserDataError for a bootstrap that cannot become user-data.
  virtual std::optional<GuestPlan> plan(const InstanceRecord& record,
                                        const wire::BootstrapInstance& bootstrap) = 0;
  /// For binding the warm guest `warm` to garm's `bootstrap` (already validated). Throws
  /// userdata::UserDataError for a bootstrap that cannot become an assignment.
  virtual GuestBinding bind(const InstanceRecord& warm,
                            const wire::BootstrapInstance& bootstrap) = 0;
  /// Gives `plan` an address no instance holds and runs `persist` (which records the instance
  /// and returns its record), then admits it, all atomically with respect to other creates and
  /// to release_unheld, so no two guests are given one address. Throws ServiceError
  /// (no_capacity) when every address is held or resting.
  virtual void assign_address(GuestPlan& plan,
                              const std::function<InstanceRecord(const GuestPlan&)>& persist) = 0;
  /// How many of the range's addresses are held, resting and free; nothing when guests get no
  /// address. Throws HypervisorError.
  virtual std::optional<AddressCount> addresses() = 0;
  /// Adds the guest's DHCP reservation. Throws HypervisorError.
  virtual void reserve(const GuestRecord& guest) = 0;
  /// The guest's seed and relay access follow `record` (its tokens, address, open or closed).
  virtual void admit(const InstanceRecord& record) = 0;
  /// Ends the guest's seed and relay access.
  virtual void revoke(std::string_view domain_name) = 0;
  /// Removes its DHCP reservation, if any; its address rests before it is handed out again.
  virtual void release(const GuestRecord& guest) = 0;
  /// Removes reservations in the agent's range held by no admitted instance and by none of
  /// `recorded()` (records whose teardown is unfinished). Returns how many.
  virtual std::size_t release_unheld(const std::function<std::set<std::string>()>& recorded) = 0;
  /// What the guest reported and its reserved address; nothing for an unknown instance.
  virtual std::optional<GuestView> view(std::string_view domain_name) const = 0;
};

/// The guest side of an agent without `[guests]`: guests get no address, seed or relay.
class NoGuests final : public GuestSide {
 public:
  bool enabled() const override { return false; }
  std::optional<GuestPlan> plan(const InstanceRecord&, const wire::BootstrapInstance&) override {
    return std::nullopt;
  }
  GuestBinding bind(const InstanceRecord& warm, const wire::BootstrapInstance&) override {
    return {.guest = warm.guest.value_or(GuestRecord{}), .assignment = ""};
  }
  void assign_address(GuestPlan& plan,
                      const std::function<InstanceRecord(const GuestPlan&)>& persist) override {
    persist(plan);
  }
  std::optional<AddressCount> addresses() override { return std::nullopt; }
  void reserve(const GuestRecord&) override {}
  void admit(const InstanceRecord&) override {}
  void revoke(std::string_view) override {}
  void release(const GuestRecord&) override {}
  std::size_t release_unheld(const std::function<std::set<std::string>()>&) override { return 0; }
  std::optional<GuestView> view(std::string_view) const override { return std::nullopt; }
};

}  // namespace garm_edge::agent
