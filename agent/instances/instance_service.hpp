#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "agent/base/clock.hpp"
#include "agent/base/config.hpp"
#include "agent/base/log.hpp"
#include "agent/instances/cache_generations.hpp"
#include "agent/instances/capacity.hpp"
#include "agent/instances/create_gate.hpp"
#include "agent/instances/event_log.hpp"
#include "agent/instances/guest_side.hpp"
#include "agent/instances/image_bases.hpp"
#include "agent/instances/instance_ids.hpp"
#include "agent/instances/instance_store.hpp"
#include "agent/instances/keyed_mutex.hpp"
#include "agent/instances/service_error.hpp"
#include "agent/instances/shares.hpp"
#include "agent/instances/startup_tracker.hpp"
#include "agent/instances/warm_restores.hpp"
#include "hypervisor/hypervisor.hpp"
#include "wire/bootstrap.hpp"
#include "wire/pool_shape.hpp"
#include "wire/provider_instance.hpp"

namespace garm_edge::agent {

struct DryRunResult {
  bool already_exists = false;  // create would return the existing instance
  std::string domain_name;
  std::string domain_xml;
  std::string volume_xml;
  std::string user_data;            // what the guest would boot with; empty without [guests]
  wire::ProviderInstance instance;  // what create would return
};

struct ReconcileReport {
  std::size_t rolled_back_creates = 0;
  std::size_t finished_deletes = 0;
  std::size_t vanished_domains = 0;     // record kept, domain gone behind our back
  std::size_t orphan_domains = 0;       // our tag and state ID, no record
  std::size_t orphan_volumes = 0;       // our naming, no record and no domain
  std::size_t orphan_reservations = 0;  // in our address range, held by no instance
  std::size_t other_state = 0;          // our tag, but made with another state directory: kept
  std::size_t busy = 0;                 // in use by a live operation: left for the next pass
  std::size_t failures = 0;
};

/// What a cache builder boots with (InstanceService::create_builder).
struct BuilderSpec {
  std::string cache;
  std::string image;
  std::string flavor;
  std::string user_data;
  std::vector<hypervisor::ExtraDisk> disks;
};

/// garm's command set over libvirt, free of any transport. Every operation acts only on
/// domains that carry this agent's tag and the caller's controller ID. Operations on one
/// instance are serialized; creates beyond the configured cap wait their turn.
class InstanceService {
 public:
  InstanceService(const AgentConfig& config, hypervisor::Hypervisor& hypervisor,
                  InstanceStore& store, const Clock& clock, Logger& logger);

  /// From now on every created instance gets guest access (address, filter, seed) through
  /// `guests`, which is told of every recorded instance first. Without this: NoGuests.
  void serve_guests(GuestSide& guests);
  /// Images with a `source` back onto what `images` has ready (agent/images pulls them).
  void use_image_bases(ImageBases& images);
  /// Null until use_image_bases.
  const ImageBases* image_bases() const { return images_; }
  ImageBases* image_bases() { return images_; }
  /// Caches back onto what `caches` has current (agent/caches refreshes them). Without this,
  /// guests get no cache.
  void use_cache_generations(CacheGenerations& caches);
  /// Null until use_cache_generations.
  CacheGenerations* cache_generations() { return caches_; }
  /// Boots a builder of a cache's refresh (docs/caches.md): a guest of `spec`'s image and
  /// flavor with its user-data and disks, under kCacheBuilderControllerId, never given anything
  /// of garm's; counted against the host's capacity. Returns its domain name.
  std::string create_builder(const BuilderSpec& spec);
  /// The builder's power state; nothing when it is gone.
  std::optional<hypervisor::PowerState> builder_state(const std::string& domain_name);
  void remove_builder(const std::string& domain_name);
  /// Removes every builder (those an agent that stopped left). Returns how many.
  std::size_t remove_builders();
  /// Whether an overlay of a recorded instance backs onto `base_path` (a replaced base is
  /// removed only when none does).
  bool base_in_use(const std::string& base_path);
  /// Whether a cache overlay of a recorded instance backs onto the generation at `path`.
  bool generation_in_use(const std::string& path);
  /// Under the instance's lock: reads its record, lets `change` edit the guest part, writes it
  /// back when `change` returns true and then tells `recorded`. Never waits for the lock: when
  /// an operation holds the instance (a graceful stop, up to stop_grace), the edit runs as that
  /// operation lets go, so a guest's request never holds a worker behind it. Nothing when there
  /// is no such record with a guest by then. Both callbacks must capture by value.
  void update_guest(std::string_view domain_name, std::function<bool(GuestRecord&)> change,
                    std::function<void(const InstanceRecord&)> recorded = {});
  EventLog& events() { return events_; }
  /// Each instance's start-up timeline and their histograms (docs/observability.md).
  StartupTracker& startup() { return startup_; }
  /// A status report of the guest moves its start on: first status, then idle (with the whole
  /// timeline in the event history) or failed.
  void record_startup_report(const InstanceRecord& record, std::string_view status);
  /// What the instance's guest reported and how it reaches the agent, without its seed or
  /// token hashes. Nothing when there is no such instance or it has no guest access.
  std::optional<GuestRecord> guest_status(const ControllerId& controller,
                                          const InstanceRef& instance);
  /// The instance's start-up timeline, while the agent tracks it (since its create or binding
  /// in this run of the agent, until it is deleted).
  std::optional<StartupTimeline> startup_timeline(const ControllerId& controller,
                                                  const InstanceRef& instance);

  /// Whether a create may boot a new guest when no warm guest of its image and flavor is ready.
  enum class WarmUse {
    preferred,  // a ready warm guest if there is one, else a cold create
    only,       // a ready warm guest, else refused with no_capacity (placement's first try)
  };
  /// Idempotent by instance name. Returns a running instance or throws; whatever a failed
  /// create made is removed before the error is thrown.
  wire::ProviderInstance create(const ControllerId& controller,
                                const wire::BootstrapInstance& bootstrap,
                                WarmUse warm_use = WarmUse::preferred);
  /// Validates a create and renders what it would define, creating nothing.
  DryRunResult dry_run_create(const ControllerId& controller,
                              const wire::BootstrapInstance& bootstrap);

  /// Would a pool with this image, flavor and extra specs work here? Throws invalid_argument
  /// naming what would not.
  void validate_pool(const ControllerId& controller, const PoolSpec& pool);

  std::optional<wire::ProviderInstance> get(const ControllerId& controller,
                                            const InstanceRef& instance);
  /// The pool's instances, by name; from the domains' tags, so a lost record hides nothing.
  std::vector<wire::ProviderInstance> list(const ControllerId& controller, const PoolId& pool);
  /// False when there was nothing to delete (which is success).
  bool remove(const ControllerId& controller, const InstanceRef& instance);
  /// Throws not_found for no such instance, conflict for one being deleted.
  void start(const ControllerId& controller, const InstanceRef& instance);
  /// `force`: power off at once; otherwise ACPI shutdown, then power off after the grace time.
  void stop(const ControllerId& controller, const InstanceRef& instance, bool force);
  /// Deletes every instance of the controller; returns how many there were.
  std::size_t remove_all(const ControllerId& controller);

  /// The host's resources, what its instances and creates under way take, its guest addresses
  /// and whether it is draining: what placement needs, from one listing.
  CapacityReport capacity();
  /// Creates refused before any work, by reason, since start (docs/shares.md).
  const RefusalCounters& refusals() const { return refusals_; }
  /// Draining: creates are refused (code draining); everything else goes on. Kept in the
  /// state directory. Throws internal when the switch cannot be kept.
  void set_draining(bool draining);
  bool draining() const;
  /// Is a create of this instance name under way here (queued or running)? garm's retry of it
  /// must not be placed on another agent meanwhile.
  bool create_under_way(const ControllerId& controller, const std::string& name) const;
  // ---- warm guests (docs/warm-guests.md) ---------------------------------------------------
  /// Warm guests not yet bound, from their records.
  std::vector<InstanceRecord> warm_guests();
  /// Per [[warm]] entry, its guests (of its current settings) ready and warming.
  std::vector<WarmCount> warm_counts();
  /// Creates one warm guest of `warm` (under kWarmControllerId, counted against the host's
  /// capacity like any instance). Throws like create.
  wire::ProviderInstance create_warm(const WarmConfig& warm);
  /// The warm guest finished its generic part. True when it was made ready now; false when it
  /// is not a warm guest warming, or when an operation holds it (then it is made ready as that
  /// operation lets go: a guest never waits behind one).
  bool mark_warm_ready(std::string_view domain_name);
  /// A bound warm guest's assignment; nothing before it is bound, while an operation holds it
  /// (the guest asks again) or once it runs.
  std::optional<std::string> take_assignment(std::string_view domain_name);
  /// The bound warm guest's first call to garm proves it runs its assignment: the assignment
  /// and its token are done with (as soon as no operation holds the instance).
  void finish_assignment(std::string_view domain_name);
  /// `listener` hears each warm guest's domain name once it is bound (its assignment there
  /// and its record unlocked); empty: nobody hears.
  void on_warm_bound(std::function<void(const std::string&)> listener);
  /// Warm guests bound to garm's creates since the agent started.
  std::size_t warm_bound() const { return warm_bound_.load(); }
  /// Saves a ready warm guest to disk: its memory to a raw volume beside its overlay, its
  /// domain shut off (QEMU gone). False when it is no ready warm guest (any more). Throws when
  /// the save failed; the guest is then ready again, or removed.
  bool save_warm(std::string_view domain_name);
  /// Can a saved warm guest still be restored: its domain shut off and its memory file there?
  bool saved_intact(const InstanceRecord& record);
  const WarmRestores& warm_restores() const { return warm_restores_; }

  /// Where the storage pool keeps its volumes. Throws HypervisorError.
  std::string storage_pool_path() { return hypervisor_.pool_path(config_.storage_pool); }
  /// Whether libvirt answers, for /healthz.
  hypervisor::HypervisorHealth health();

  /// Finishes or rolls back interrupted intents, drops records of vanished domains and removes
  /// tagged domains without a record. Never touches a domain without this agent's tag.
  ReconcileReport reconcile();

  /// This agent's domains by power state (running, shutoff, ...), for metrics.
  std::map<std::string, std::size_t> count_by_state();

  const AgentConfig& config() const { return config_; }

 private:
  struct CreatePlan {
    InstanceRecord record;
    hypervisor::VolumeSpec volume;
    hypervisor::DomainSpec domain;
    std::optional<GuestPlan> guest;
    Resources resources;  // the flavor's, counted against the host's capacity
    /// The pool's priority as asked (extra spec `priority`), before the operator's cap.
    std::optional<wire::Priority> priority;
    std::vector<hypervisor::VolumeSpec> cache_volumes;    // one per record.caches entry
    wire::PoolShape shape;                                // what the pool's extra specs ask
    std::vector<hypervisor::VolumeSpec> scratch_volumes;  // one per record.scratch_disks entry
    std::vector<hypervisor::NetworkInterface> extra_interfaces;  // after the guest's own
  };

  CreatePlan plan_create(const ControllerId& controller, const wire::BootstrapInstance& bootstrap);
  /// create(), for garm (`warm` null) or for a warm guest.
  wire::ProviderInstance create_as(const ControllerId& controller,
                                   const wire::BootstrapInstance& bootstrap, const WarmRecord* warm,
                                   WarmUse warm_use);
  /// Under the instance's lock: makes a ready warm guest of the plan's controller, image and
  /// flavor garm's instance, if there is one. Another controller's warm guest is never taken.
  std::optional<wire::ProviderInstance> bind_warm(const wire::BootstrapInstance& bootstrap,
                                                  const CreatePlan& plan);
  /// bind_warm for one candidate, under its lock.
  std::optional<wire::ProviderInstance> bind_candidate(const InstanceRecord& candidate,
                                                       const wire::BootstrapInstance& bootstrap,
                                                       const CreatePlan& plan,
                                                       std::string_view spec,
                                                       std::chrono::system_clock::time_point taken);
  /// Under the saved guest's lock: restores it for `plan`'s create, within the host's room
  /// for it (else no_capacity). Nothing when it could not be restored: it is then removed,
  /// counted by reason, and the create goes on without it.
  std::optional<hypervisor::Domain> restore_saved(const InstanceRecord& saved,
                                                  const CreatePlan& plan);
  /// Is `record` a ready warm guest of `spec` that `controller`'s create may take?
  static bool bindable(const InstanceRecord& record, std::string_view spec,
                       std::string_view controller);
  /// The domain a warm guest bound to `name` became (its name is not domain_name_for's).
  std::optional<hypervisor::Domain> find_bound(const ControllerId& controller,
                                               const std::string& name);
  /// After a failed binding: the warm guest's record and tags as they were, or it is removed.
  void unbind(const InstanceRecord& warm, const hypervisor::Domain& domain, bool restored);
  /// The tags a record's domain carries: its names, and the resources it was made with.
  hypervisor::Tags bound_tags(const InstanceRecord& bound, const hypervisor::Domain& domain) const;
  /// The last runner tool `controller` sent for an image's OS and arch in a create that
  /// succeeded, for its own warm guests to unpack.
  std::optional<wire::RunnerApplicationDownload> latest_tool(std::string_view controller,
                                                             const ImageConfig& image);
  /// Called only once `controller`'s create succeeded: a refused or repeated create, or
  /// another controller's, never chooses what a warm guest unpacks.
  void remember_tool(const ControllerId& controller, const wire::BootstrapInstance& bootstrap);
  /// With tools_mutex_ held: reads runner-tools.json once.
  void load_tools();
  /// With tools_mutex_ held: writes runner-tools.json (without GHES's tokens).
  void save_tools() const;
  /// garm's retry of a create that finished: the running instance. Leftovers of one that did
  /// not finish are removed first; a domain of that name that is not ours is a conflict.
  std::optional<wire::ProviderInstance> reuse_existing(const CreatePlan& plan);
  /// The caches a guest of the plan gets (its controller's, for its image or pool or asked for
  /// in its extra specs), each with a current generation: into the record, volumes and domain.
  /// Throws ServiceError (invalid_argument) for a request of a cache the pool may not have.
  void plan_caches(CreatePlan& plan, const wire::BootstrapInstance& bootstrap);
  /// The caches a pool's extra specs ask for, each one of `controller`'s (else invalid_argument):
  /// the one check of pool validation and create.
  std::vector<std::string> requested_caches(const std::optional<nlohmann::json>& extra_specs,
                                            const std::string& controller) const;
  /// The pool's shape (agent/instances/instance_shape.cpp): root disk, scratch disks, further
  /// NICs, nested virtualization, virt type; into the plan's record, volumes, domain and
  /// resources. Throws ServiceError (invalid_argument) for what the agent does not allow.
  void plan_shape(CreatePlan& plan, const wire::BootstrapInstance& bootstrap,
                  const FlavorConfig& flavor);
  void plan_scratch_disks(CreatePlan& plan);
  void plan_extra_nics(CreatePlan& plan);
  /// Nested virtualization and `virt_type = kvm` against what the host offers.
  void check_hypervisor_shape(const CreatePlan& plan);
  void create_scratch_volumes(CreatePlan& plan);
  void delete_scratch_volumes(const InstanceRecord& record);
  /// The cache overlays of a planned create, each backed by its generation.
  void create_cache_volumes(CreatePlan& plan);
  void delete_cache_volumes(const InstanceRecord& record);
  /// Records the intent, then volume, domain and start; on any failure removes what it made.
  wire::ProviderInstance run_create(CreatePlan& plan);
  /// Gives the guest its address and records the intent, atomically with respect to other
  /// creates, so no two guests are given one address.
  void record_create_intent(CreatePlan& plan);
  /// A saved warm guest restored for garm's create: it holds its slot and disk already, and
  /// its vCPUs and memory come back. Its hold (under its own domain's name) is the whole guest.
  struct Restoring {
    std::string domain_name;
    Resources held;
    Resources added;
  };
  /// Refuses a create on a draining host or beyond its capacity; otherwise the create's
  /// resources stay reserved until the returned hold is gone.
  CapacityLedger::Hold admit_create(const CreatePlan& plan,
                                    const std::optional<Restoring>& restoring = std::nullopt);
  /// Why the host itself has no room for the plan's flavor, with what its instances take.
  std::string no_room_text(const CreatePlan& plan, const Resources& limit,
                           const std::optional<AddressCount>& addresses);
  /// What each of the agent's domains takes, from its tags.
  std::vector<InstanceResources> resources_of(const std::vector<hypervisor::Domain>& domains) const;
  std::vector<InstanceResources> resources_of_agent_domains();
  /// A domain's resources as when it runs (a saved warm guest's once restored).
  Resources running_resources_of(const hypervisor::Domain& domain) const;
  /// The image's base file: the pulled one when ready, else the local one. Throws
  /// no_capacity while a pulled image has none yet, internal when a volume is missing.
  ImageBase base_image(const ImageConfig& image);
  std::pair<const ImageConfig*, const FlavorConfig*> fit_pool(
      const std::string& image, const std::string& flavor, std::optional<wire::OsType> os_type,
      std::optional<wire::OsArch> arch) const;

  /// What a provider ID or instance name refers to. `uuid` is set when the reference was a
  /// provider ID, so the instance can be re-checked once its lock is held.
  struct Target {
    std::string domain_name;
    std::optional<std::string> uuid;
  };
  /// The instance a reference resolves to for this controller, if any.
  Target resolve(const ControllerId& controller, const InstanceRef& instance);
  /// Under the instance's lock: the domain `target` still refers to, if it exists.
  std::optional<hypervisor::Domain> locate(const ControllerId& controller, const Target& target);
  /// Locks the instance a reference names: its canonical name first (what create locks), then
  /// the domain it resolves to under that lock, when that differs (a bound warm guest).
  std::pair<std::vector<KeyedMutex::Guard>, Target> lock_target(const ControllerId& controller,
                                                                const InstanceRef& instance);
  /// Resolves and locks an instance that must exist (start, stop); throws not_found.
  std::pair<std::vector<KeyedMutex::Guard>, hypervisor::Domain> lock_existing(
      const ControllerId& controller, const InstanceRef& instance);
  std::optional<hypervisor::Domain> find_owned_domain(const ControllerId& controller,
                                                      std::string_view domain_name);
  /// Under the instance's lock: marks the record deleting, then tears down; false when there
  /// was nothing of `target`.
  bool remove_locked(const ControllerId& controller, const Target& target);
  /// Removes domain, overlay and record; each step is idempotent so it can run again.
  void teardown(const InstanceRecord& record);
  /// Runs `action` under the instance's lock, unless a live operation holds it (counted busy);
  /// its failure is counted and logged, and the pass goes on.
  void run_if_idle(const std::string& domain_name, ReconcileReport& report,
                   const std::function<void()>& action);
  void reconcile_records(ReconcileReport& report);
  void reconcile_domains(ReconcileReport& report);
  void reconcile_volumes(ReconcileReport& report);
  void release_unheld_addresses(ReconcileReport& report);
  void reconcile_record(const InstanceRecord& record, ReconcileReport& report);
  void reconcile_domain(const hypervisor::Domain& domain, ReconcileReport& report);
  void reconcile_volume(const std::string& pool, const std::string& volume_name,
                        const std::string& domain_name, ReconcileReport& report);
  /// Logs the unreadable records when their set differs from the last one logged.
  void report_unreadable(const std::vector<std::string>& unreadable);

  wire::ProviderInstance describe(const hypervisor::Domain& domain) const;
  hypervisor::Tags tags_for(const InstanceRecord& record) const;

  const AgentConfig& config_;
  hypervisor::Hypervisor& hypervisor_;
  InstanceStore& store_;
  const Clock& clock_;
  Logger& log_;
  KeyedMutex instance_locks_;
  /// Deletes by name, so a create they overtook before its lock stops (see DeleteMarks).
  DeleteMarks deletes_;
  CreateGate create_gate_;
  CapacityLedger capacity_ledger_;
  RefusalCounters refusals_;
  DrainSwitch drain_;
  EventLog events_;
  StartupTracker startup_;
  NoGuests no_guests_;
  GuestSide* guests_ = &no_guests_;
  ImageBases* images_ = nullptr;
  CacheGenerations* caches_ = nullptr;
  std::atomic<std::size_t> warm_bound_{0};
  std::mutex warm_bound_mutex_;
  std::function<void(const std::string&)> warm_bound_listener_;
  WarmRestores warm_restores_;
  std::mutex tools_mutex_;
  /// Whose runner tool for which OS and arch: one controller's tools reach its own warm
  /// guests only.
  struct ToolKey {
    std::string controller;
    std::string os;    // GitHub's spelling, as garm's tools: linux, win
    std::string arch;  // x64, arm64, arm
    auto operator<=>(const ToolKey&) const = default;
  };
  /// The key of an image's OS and arch for `controller`.
  static ToolKey tool_key_of(std::string_view controller, const ImageConfig& image);
  std::map<ToolKey, wire::RunnerApplicationDownload> latest_tools_;
  bool tools_loaded_ = false;
  std::mutex unreadable_mutex_;
  std::vector<std::string> reported_unreadable_;
  std::mutex reconcile_mutex_;
};

}  // namespace garm_edge::agent
