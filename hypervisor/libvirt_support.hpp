#pragma once

// Small pieces over the libvirt C API shared by the libvirt Hypervisor: owning handles, error
// capture and mapping, and reads of one domain. Internal to hypervisor/.

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <libvirt/libvirt.h>
#include <libvirt/virterror.h>

#include "hypervisor/guest_arch.hpp"
#include "hypervisor/hypervisor.hpp"

namespace garm_edge::hypervisor::libvirt {

struct DomainFree {
  void operator()(virDomainPtr domain) const { virDomainFree(domain); }
};
struct PoolFree {
  void operator()(virStoragePoolPtr pool) const { virStoragePoolFree(pool); }
};
struct VolumeFree {
  void operator()(virStorageVolPtr volume) const { virStorageVolFree(volume); }
};
struct CFree {
  void operator()(char* text) const { std::free(text); }
};
using DomainHandle = std::unique_ptr<virDomain, DomainFree>;
using PoolHandle = std::unique_ptr<virStoragePool, PoolFree>;
using VolumeHandle = std::unique_ptr<virStorageVol, VolumeFree>;
using CString = std::unique_ptr<char, CFree>;

/// libvirt's thread-local last error, copied at once: any later libvirt call on this thread,
/// even virDomainGetName, resets it.
struct Failure {
  int code = VIR_ERR_OK;
  HypervisorError::Kind kind = HypervisorError::Kind::failed;
  std::string message;

  /// Copies and clears the current thread's last error.
  static Failure capture();
  [[noreturn]] void raise(const std::string& what) const;
};

/// Captures the last error and throws it as a HypervisorError about `what`.
[[noreturn]] void throw_last_error(const std::string& what);

HypervisorError::Kind classify(const virError& error);

/// Nothing when there is no such domain; throws on any other failure.
DomainHandle lookup_uuid(virConnectPtr conn, const std::string& uuid);
DomainHandle lookup_name(virConnectPtr conn, const std::string& name);
DomainHandle require_uuid(virConnectPtr conn, const std::string& uuid);
bool is_active(virDomainPtr domain);
PowerState state_of(virDomainPtr domain);

/// Name and UUID bytes, read once per domain: every libvirt domain call formats the UUID for
/// its debug log even when logging is off, so calls are worth saving in a listing.
struct Identity {
  std::string name;
  std::string raw_uuid;  // 16 bytes: a cheap cache key
};
Identity identity_of(virDomainPtr domain);
std::string format_uuid(std::string_view raw_uuid);

/// Our tags, or nothing when the domain carries no metadata element of ours.
std::optional<Tags> read_tags(virDomainPtr domain);
/// Addresses from the DHCP leases of libvirt's own networks (never from the guest agent or
/// ARP, which a guest controls). Best effort: a domain without a lease has none yet.
std::vector<InterfaceAddress> leased_addresses(virDomainPtr domain);

PoolHandle require_pool(virConnectPtr conn, const std::string& pool);
/// Nothing when there is no such volume.
VolumeHandle lookup_volume(virStoragePoolPtr pool, const std::string& name);
std::string path_of(virStorageVolPtr volume);

/// The virt type for each architecture the host's capabilities offer.
std::map<GuestArch, VirtType> virt_types_from_capabilities(std::string_view caps_xml);

/// Does kvm_intel's or kvm_amd's `nested` parameter (under `kernel_modules`) say Y or 1?
bool kvm_offers_nested(const std::filesystem::path& kernel_modules);

}  // namespace garm_edge::hypervisor::libvirt
