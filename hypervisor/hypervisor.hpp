#pragma once

#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace garm_edge::hypervisor {

/// Every failure that crosses this boundary, classified so callers can decide without looking
/// at libvirt error codes.
class HypervisorError : public std::runtime_error {
 public:
  enum class Kind {
    not_found,
    already_exists,
    invalid_state,
    invalid_argument,
    unavailable,  // the connection to the hypervisor is down
    timeout,
    unsupported,
    failed,
  };

  HypervisorError(Kind kind, const std::string& message)
      : std::runtime_error(message), kind_(kind) {}

  Kind kind() const noexcept { return kind_; }

 private:
  Kind kind_;
};

enum class GuestArch { x86_64, aarch64, armv7l };
enum class PowerState { running, paused, shutoff, crashed, other };
/// The libvirt <domain type=...>: "test" on the test driver, "kvm" when /dev/kvm can run the
/// guest, else "qemu" (TCG emulation).
enum class VirtType { test, kvm, qemu };

std::string_view to_string(GuestArch arch);
std::string_view to_string(PowerState state);

/// Key/value labels stored in a domain's namespaced <metadata> element. Keys are lower-case
/// XML-name-safe tokens chosen by the caller; values are any UTF-8 text without control
/// characters. Order is kept.
class Tags {
 public:
  Tags() = default;
  Tags(std::initializer_list<std::pair<std::string, std::string>> entries);

  void set(std::string key, std::string value);
  std::optional<std::string_view> get(std::string_view key) const;
  /// True when every pair of `filter` is present here with the same value.
  bool matches(const Tags& filter) const;
  const std::vector<std::pair<std::string, std::string>>& entries() const { return entries_; }
  bool empty() const { return entries_.empty(); }

  bool operator==(const Tags&) const = default;

 private:
  std::vector<std::pair<std::string, std::string>> entries_;
};

struct NetworkInterface {
  std::string network;  // a libvirt network name, or
  std::string bridge;   // a host bridge (then `network` is empty)
  std::string mac;      // empty: libvirt chooses
  /// An nwfilter bound to the interface with `filter_ip` as its IP parameter, so the guest can
  /// send only from that address. Empty: no filter.
  std::string filter;
  std::string filter_ip;
};

/// A further virtio disk; the guest finds it as /dev/disk/by-id/virtio-<serial>.
struct ExtraDisk {
  std::string path;
  std::string format = "qcow2";
  std::string serial;  // 1-20 of [a-z0-9-]: virtio-blk keeps 20 bytes of it
};

/// Everything needed to define one guest. The hypervisor fills in per-architecture defaults.
struct DomainSpec {
  std::string name;
  std::string uuid;
  GuestArch arch = GuestArch::x86_64;
  unsigned vcpus = 1;
  std::uint64_t memory_mib = 512;
  std::string disk_path;
  std::string disk_format = "qcow2";
  std::vector<ExtraDisk> extra_disks;  // vdb, vdc, ... in this order; at most 16
  std::vector<NetworkInterface> interfaces;
  std::string smbios_serial;  // e.g. a cloud-init NoCloud seed line; empty: none
  /// May the guest run a hypervisor itself? Off: the CPU hides VMX and SVM from it.
  bool nested_virtualization = false;
  /// Emulation (TCG) even where KVM could run the guest; unset: the host's best.
  bool emulated = false;
  /// A VM generation ID device (x86_64 only): libvirt gives it a new value on every restore from
  /// a saved state, and the guest's kernel reseeds its random number generator when it changes.
  bool generation_id = false;
  Tags tags;
};

struct InterfaceAddress {
  std::string mac;
  std::string ip;
  unsigned prefix = 0;
  bool ipv6 = false;
};

struct Domain {
  std::string name;
  std::string uuid;
  PowerState state = PowerState::other;
  Tags tags;  // empty when the domain has no metadata element of ours
  /// From the DHCP leases of libvirt's own networks; empty when not running. Filled by the
  /// single-domain lookups only: reading leases per domain in a listing would cost O(n^2) on
  /// a real host (each lookup parses the network's whole lease file).
  std::vector<InterfaceAddress> addresses;
};

struct VolumeSpec {
  std::string pool;
  std::string name;
  std::uint64_t capacity_bytes = 0;
  std::string backing_path;  // empty: an empty (sparse) volume
  std::string backing_format = "qcow2";
  std::string format = "qcow2";  // raw: a file libvirt writes as it is (a saved memory state)
};

struct Volume {
  std::string pool;
  std::string name;
  std::string path;
};

/// A static DHCP lease on a libvirt network: the guest with `mac` always gets `ip`.
struct DhcpHost {
  std::string mac;
  std::string ip;

  bool operator==(const DhcpHost&) const = default;
};

struct DhcpRange {
  std::string start;
  std::string end;
};

/// The IPv4 side of a libvirt network, as guests see it.
struct NetworkInfo {
  std::string name;
  std::string forward_mode;  // nat, route, open, ...; empty: isolated
  std::string bridge;
  std::string gateway;  // the host's address on the network
  unsigned prefix = 0;
  std::vector<DhcpRange> ranges;  // addresses dnsmasq hands out dynamically
  std::vector<DhcpHost> hosts;    // static reservations
  bool active = false;
};

struct HostCapacity {
  unsigned cpus = 0;
  std::uint64_t memory_mib = 0;
  std::string machine;  // the host's CPU architecture as libvirt names it: x86_64, aarch64, ...
  /// How guests of each architecture the host can run are run (kvm, qemu, test).
  std::map<GuestArch, VirtType> virt_types;
  /// Does the host's KVM let guests run KVM themselves (the kvm module's `nested`)?
  bool nested_virtualization = false;
};

/// Whether the hypervisor answers now, and if not, why (for health checks and operators).
struct HypervisorHealth {
  bool reachable = true;
  std::string detail;
};

/// The boundary to the virtualization layer. Knows nothing of garm. Removal operations are
/// idempotent and return whether there was something to remove. Calls may throw HypervisorError.
class Hypervisor {
 public:
  virtual ~Hypervisor() = default;

  /// The XML `define` would submit, for dry runs.
  virtual std::string domain_xml(const DomainSpec& spec) const = 0;
  /// Defines (does not start) a persistent domain; refuses a name that already exists.
  virtual Domain define(const DomainSpec& spec) = 0;
  /// Starts a defined domain; a running one is left alone.
  virtual void start(std::string_view uuid) = 0;
  /// Asks the guest to power off (ACPI) and waits up to `grace`, then powers it off hard.
  virtual void shutdown(std::string_view uuid, std::chrono::milliseconds grace) = 0;
  /// Powers a domain off at once. False when it was not running.
  virtual bool destroy(std::string_view uuid) = 0;
  /// Removes a (stopped) domain's definition. False when there was no such domain.
  virtual bool undefine(std::string_view uuid) = 0;
  /// Writes a running domain's memory and device state to `path` (an existing volume's file)
  /// and stops it; its definition stays. May take as long as writing its memory out.
  virtual void save(std::string_view uuid, const std::string& path) = 0;
  /// Starts the domain saved in `path` where it was saved. Throws when the file is damaged or
  /// was written by another QEMU or for another definition; the file is left as it was.
  virtual void restore(const std::string& path) = 0;

  virtual std::optional<Domain> find_by_uuid(std::string_view uuid) = 0;
  virtual std::optional<Domain> find_by_name(std::string_view name) = 0;
  /// Domains that carry our metadata element and match every pair of `filter`. Complete or an
  /// exception: never a partial list.
  virtual std::vector<Domain> list(const Tags& filter) = 0;
  virtual std::vector<std::string> disk_paths(std::string_view uuid) = 0;
  /// Replaces a domain's tags, live and in its persistent definition; list() and find_* see
  /// the new ones as soon as this returns. Throws not_found for no such domain.
  virtual void set_tags(std::string_view uuid, const Tags& tags) = 0;

  /// Creates a copy-on-write volume backed by `spec.backing_path`, or an empty one without.
  virtual Volume create_overlay(const VolumeSpec& spec) = 0;
  virtual std::optional<Volume> find_volume(std::string_view pool, std::string_view name) = 0;
  /// False when there was no such volume.
  virtual bool delete_volume(std::string_view pool, std::string_view name) = 0;
  /// Names of every volume in a storage pool.
  virtual std::vector<std::string> list_volumes(std::string_view pool) = 0;
  /// The directory a storage pool keeps its volumes in.
  virtual std::string pool_path(std::string_view pool) = 0;

  virtual HostCapacity capacity() = 0;
  /// A cheap round trip with a short deadline; never throws.
  virtual HypervisorHealth health() = 0;

  virtual NetworkInfo network(std::string_view name) = 0;
  /// Reserves `host.ip` for `host.mac` in the network's DHCP server, live and persistent.
  /// Throws already_exists when either is reserved already.
  virtual void add_dhcp_host(std::string_view network, const DhcpHost& host) = 0;
  /// False when there was no such reservation.
  virtual bool remove_dhcp_host(std::string_view network, const DhcpHost& host) = 0;

  /// Is an nwfilter of this name defined? Throws unsupported where the driver has no nwfilters.
  virtual bool has_filter(std::string_view name) = 0;
  /// Defines (or redefines) `name` as a filter that drops frames whose source MAC, ARP sender
  /// or IPv4 source is not the interface's own MAC or IP parameter.
  virtual void define_source_ip_filter(std::string_view name) = 0;
};

}  // namespace garm_edge::hypervisor
