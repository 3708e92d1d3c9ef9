#include "hypervisor/libvirt_hypervisor.hpp"

#include <cstdlib>
#include <set>
#include <thread>

#include <libvirt/libvirt.h>
#include <libvirt/virterror.h>
#include <pugixml.hpp>

#include "hypervisor/domain_xml.hpp"
#include "hypervisor/libvirt_event_loop.hpp"

namespace garm_edge::hypervisor {
namespace {

using Kind = HypervisorError::Kind;

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

Kind classify(const virError& error) {
  switch (error.code) {
    case VIR_ERR_NO_DOMAIN:
    case VIR_ERR_NO_DOMAIN_METADATA:
    case VIR_ERR_NO_NETWORK:
    case VIR_ERR_NO_STORAGE_POOL:
    case VIR_ERR_NO_STORAGE_VOL:
    case VIR_ERR_NO_NWFILTER:
      return Kind::not_found;
    case VIR_ERR_DOM_EXIST:
    case VIR_ERR_STORAGE_VOL_EXIST:
      return Kind::already_exists;
    case VIR_ERR_OPERATION_INVALID:
      return Kind::invalid_state;
    case VIR_ERR_INVALID_ARG:
    case VIR_ERR_XML_ERROR:
    case VIR_ERR_XML_DETAIL:
    case VIR_ERR_CONFIG_UNSUPPORTED:
      return Kind::invalid_argument;
    case VIR_ERR_NO_SUPPORT:
      return Kind::unsupported;
    case VIR_ERR_OPERATION_TIMEOUT:
    case VIR_ERR_AGENT_UNRESPONSIVE:
      return Kind::timeout;
    case VIR_ERR_SYSTEM_ERROR:
    case VIR_ERR_RPC:
    case VIR_ERR_NO_CONNECT:
    case VIR_ERR_INVALID_CONN:
    case VIR_ERR_AUTH_FAILED:
      return Kind::unavailable;
    case VIR_ERR_INTERNAL_ERROR:
      return error.domain == VIR_FROM_RPC ? Kind::unavailable : Kind::failed;
    default:
      return Kind::failed;
  }
}

/// Reads libvirt's thread-local last error right after a failed call on this thread.
[[noreturn]] void throw_libvirt_error(const std::string& what) {
  const virError* error = virGetLastError();
  const Kind kind = error != nullptr ? classify(*error) : Kind::failed;
  std::string message = what + ": ";
  message +=
      error != nullptr && error->message != nullptr ? error->message : "unknown libvirt error";
  virResetLastError();
  throw HypervisorError(kind, message);
}

bool last_error_is(int code) {
  const virError* error = virGetLastError();
  const bool matches = error != nullptr && error->code == code;
  if (matches) {
    virResetLastError();
  }
  return matches;
}

DomainHandle lookup_uuid(virConnectPtr conn, const std::string& uuid) {
  DomainHandle domain(virDomainLookupByUUIDString(conn, uuid.c_str()));
  if (!domain && !last_error_is(VIR_ERR_NO_DOMAIN)) {
    throw_libvirt_error("look up domain " + uuid);
  }
  return domain;
}

DomainHandle require_uuid(virConnectPtr conn, const std::string& uuid) {
  auto domain = lookup_uuid(conn, uuid);
  if (!domain) {
    throw HypervisorError(Kind::not_found, "no domain with UUID " + uuid);
  }
  return domain;
}

bool is_active(virDomainPtr domain) {
  const int active = virDomainIsActive(domain);
  if (active < 0) {
    throw_libvirt_error(std::string("read state of domain ") + virDomainGetName(domain));
  }
  return active == 1;
}

PowerState state_of(virDomainPtr domain) {
  int state = 0;
  int reason = 0;
  if (virDomainGetState(domain, &state, &reason, 0) < 0) {
    throw_libvirt_error(std::string("read state of domain ") + virDomainGetName(domain));
  }
  switch (state) {
    case VIR_DOMAIN_RUNNING:
    case VIR_DOMAIN_BLOCKED:
      return PowerState::running;
    case VIR_DOMAIN_PAUSED:
    case VIR_DOMAIN_PMSUSPENDED:
      return PowerState::paused;
    case VIR_DOMAIN_SHUTOFF:
      return PowerState::shutoff;
    case VIR_DOMAIN_CRASHED:
      return PowerState::crashed;
    default:
      return PowerState::other;
  }
}

/// Name and UUID bytes, read once per domain: every libvirt domain call formats the UUID for
/// its debug log even when logging is off, so calls are worth saving in a listing.
struct Identity {
  std::string name;
  std::string raw_uuid;  // 16 bytes: a cheap cache key
};

Identity identity_of(virDomainPtr domain) {
  unsigned char uuid[VIR_UUID_BUFLEN] = {};
  const char* name = virDomainGetName(domain);
  if (name == nullptr || virDomainGetUUID(domain, uuid) < 0) {
    throw_libvirt_error("read domain identity");
  }
  return Identity{name, std::string(reinterpret_cast<const char*>(uuid), sizeof uuid)};
}

std::string format_uuid(std::string_view raw) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string text;
  text.reserve(36);
  for (std::size_t i = 0; i < raw.size(); ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) {
      text += '-';
    }
    const auto byte = static_cast<unsigned char>(raw[i]);
    text += kHex[byte >> 4U];
    text += kHex[byte & 0x0fU];
  }
  return text;
}

/// Our tags, or nothing when the domain carries no metadata element in our namespace.
std::optional<Tags> read_tags(virDomainPtr domain) {
  const std::string ns(kMetadataNamespace);
  CString xml(virDomainGetMetadata(domain, VIR_DOMAIN_METADATA_ELEMENT, ns.c_str(), 0));
  if (!xml) {
    if (last_error_is(VIR_ERR_NO_DOMAIN_METADATA)) {
      return std::nullopt;
    }
    throw_libvirt_error(std::string("read metadata of domain ") + virDomainGetName(domain));
  }
  try {
    return parse_tags_metadata(xml.get());
  } catch (const HypervisorError&) {
    return std::nullopt;  // not something we wrote: not ours
  }
}

/// Addresses from the DHCP leases of libvirt's own networks (never from the guest agent or
/// ARP, which a guest controls). Best effort: a domain without a lease has none yet.
std::vector<InterfaceAddress> leased_addresses(virDomainPtr domain) {
  std::vector<InterfaceAddress> result;
  virDomainInterfacePtr* ifaces = nullptr;
  const int count =
      virDomainInterfaceAddresses(domain, &ifaces, VIR_DOMAIN_INTERFACE_ADDRESSES_SRC_LEASE, 0);
  if (count < 0) {
    virResetLastError();
    return result;
  }
  for (int i = 0; i < count; ++i) {
    const auto* iface = ifaces[i];
    for (unsigned k = 0; k < iface->naddrs; ++k) {
      const auto& address = iface->addrs[k];
      result.push_back(InterfaceAddress{
          .mac = iface->hwaddr != nullptr ? iface->hwaddr : "",
          .ip = address.addr != nullptr ? address.addr : "",
          .prefix = address.prefix,
          .ipv6 = address.type == VIR_IP_ADDR_TYPE_IPV6,
      });
    }
    virDomainInterfaceFree(ifaces[i]);
  }
  std::free(ifaces);
  return result;
}

enum class WithAddresses { no, yes };

Domain describe(virDomainPtr domain, const Identity& identity, Tags tags,
                WithAddresses with_addresses) {
  Domain result{
      .name = identity.name,
      .uuid = format_uuid(identity.raw_uuid),
      .state = state_of(domain),
      .tags = std::move(tags),
      .addresses = {},
  };
  if (with_addresses == WithAddresses::yes && result.state == PowerState::running) {
    result.addresses = leased_addresses(domain);
  }
  return result;
}

PoolHandle require_pool(virConnectPtr conn, const std::string& pool) {
  PoolHandle handle(virStoragePoolLookupByName(conn, pool.c_str()));
  if (!handle) {
    throw_libvirt_error("look up storage pool " + pool);
  }
  return handle;
}

VolumeHandle lookup_volume(virStoragePoolPtr pool, const std::string& name) {
  VolumeHandle volume(virStorageVolLookupByName(pool, name.c_str()));
  if (!volume && !last_error_is(VIR_ERR_NO_STORAGE_VOL)) {
    throw_libvirt_error("look up volume " + name);
  }
  return volume;
}

std::string path_of(virStorageVolPtr volume) {
  CString path(virStorageVolGetPath(volume));
  if (!path) {
    throw_libvirt_error("read volume path");
  }
  return path.get();
}

void close_callback(virConnectPtr, int, void* opaque) {
  static_cast<std::atomic<bool>*>(opaque)->store(true);
}

TagCache& cache_from(void* opaque) {
  return **static_cast<std::shared_ptr<TagCache>*>(opaque);
}

void forget_domain(virDomainPtr domain, void* opaque) {
  unsigned char uuid[VIR_UUID_BUFLEN] = {};
  if (virDomainGetUUID(domain, uuid) == 0) {
    cache_from(opaque).forget(std::string(reinterpret_cast<const char*>(uuid), sizeof uuid));
  }
}

void on_metadata_change(virConnectPtr, virDomainPtr domain, int, const char*, void* opaque) {
  forget_domain(domain, opaque);
}

void on_lifecycle(virConnectPtr, virDomainPtr domain, int event, int, void* opaque) {
  if (event == VIR_DOMAIN_EVENT_DEFINED || event == VIR_DOMAIN_EVENT_UNDEFINED) {
    forget_domain(domain, opaque);
  }
}

/// Registers `callback` for `event_id` on all domains; -1 when the driver cannot deliver it.
int watch_domains(virConnectPtr conn, int event_id, virConnectDomainEventGenericCallback callback,
                  const std::shared_ptr<TagCache>& cache) {
  auto* opaque = new std::shared_ptr<TagCache>(cache);
  const int id = virConnectDomainEventRegisterAny(
      conn, nullptr, event_id, callback, opaque,
      [](void* p) { delete static_cast<std::shared_ptr<TagCache>*>(p); });
  if (id < 0) {
    delete opaque;
    virResetLastError();
  }
  return id;
}

std::map<GuestArch, VirtType> virt_types_from_capabilities(std::string_view caps_xml) {
  pugi::xml_document caps;
  if (!caps.load_buffer(caps_xml.data(), caps_xml.size())) {
    throw HypervisorError(Kind::failed, "unreadable host capabilities XML");
  }
  std::map<std::string, std::set<std::string>> offered;
  bool test_driver = false;
  for (auto guest : caps.child("capabilities").children("guest")) {
    const auto arch = guest.child("arch");
    for (auto domain : arch.children("domain")) {
      const std::string type = domain.attribute("type").as_string();
      offered[arch.attribute("name").as_string()].insert(type);
      test_driver = test_driver || type == "test";
    }
  }
  std::map<GuestArch, VirtType> result;
  for (auto arch : {GuestArch::x86_64, GuestArch::aarch64, GuestArch::armv7l}) {
    const auto& types = offered[std::string(to_string(arch))];
    if (types.count("kvm") > 0) {
      result[arch] = VirtType::kvm;
    } else if (types.count("qemu") > 0) {
      result[arch] = VirtType::qemu;
    } else if (test_driver) {
      result[arch] = VirtType::test;  // the test driver accepts any architecture
    }
  }
  return result;
}

}  // namespace

template <class Fn>
auto LibvirtHypervisor::call(const std::string& what, Fn fn) {
  return call_within(options_.call_timeout, what, std::move(fn));
}

template <class Fn>
auto LibvirtHypervisor::call_within(std::chrono::milliseconds deadline, const std::string& what,
                                    Fn fn) {
  // The job may outlive this frame (the caller gives up at the deadline), so it owns its data.
  return runner_.run(deadline, what, [this, fn = std::move(fn)]() mutable {
    auto conn = connection();
    try {
      return fn(conn.get());
    } catch (const HypervisorError& e) {
      if (e.kind() == Kind::unavailable) {
        forget_connection(conn);
      }
      throw;
    }
  });
}

LibvirtHypervisor::LibvirtHypervisor(LibvirtOptions options)
    : options_(std::move(options)), runner_(options_.workers) {
  ensure_libvirt_event_loop();
  const auto caps = call("read capabilities of " + options_.uri, [](virConnectPtr conn) {
    CString xml(virConnectGetCapabilities(conn));
    if (!xml) {
      throw_libvirt_error("read host capabilities");
    }
    return std::string(xml.get());
  });
  virt_types_ = virt_types_from_capabilities(caps);
  if (options_.virt_type) {
    for (auto arch : {GuestArch::x86_64, GuestArch::aarch64, GuestArch::armv7l}) {
      virt_types_[arch] = *options_.virt_type;
    }
  }
}

LibvirtHypervisor::~LibvirtHypervisor() = default;

LibvirtHypervisor::ConnectionPtr LibvirtHypervisor::connection() {
  std::lock_guard lock(connection_mutex_);
  if (connection_ && !connection_closed_->load() && virConnectIsAlive(connection_.get()) == 1) {
    return connection_;
  }
  connection_ = open_connection();
  return connection_;
}

LibvirtHypervisor::ConnectionPtr LibvirtHypervisor::open_connection() {
  virConnectPtr raw = virConnectOpen(options_.uri.c_str());
  if (raw == nullptr) {
    throw_libvirt_error("connect to libvirt at " + options_.uri);
  }
  // Remote connections notice a dead or frozen daemon through keepalive; drivers without a
  // socket (test, embed) answer "unsupported", which is fine.
  constexpr int kKeepAliveIntervalS = 5;
  constexpr unsigned kKeepAliveCount = 3;
  if (virConnectSetKeepAlive(raw, kKeepAliveIntervalS, kKeepAliveCount) < 0) {
    virResetLastError();
  }
  // Drivers without a persistent connection accept the close callback but never keep it (nor
  // call a free function), so the flag is owned here, by the connection's deleter, and libvirt
  // only borrows it until the callback is unregistered.
  auto closed = std::make_shared<std::atomic<bool>>(false);
  connection_closed_ = closed;
  if (virConnectRegisterCloseCallback(raw, close_callback, closed.get(), nullptr) < 0) {
    virResetLastError();
  }
  // Events missed while disconnected cannot be replayed: start the cache afresh.
  tag_cache_->clear();
  const int metadata_watch =
      watch_domains(raw, VIR_DOMAIN_EVENT_ID_METADATA_CHANGE,
                    VIR_DOMAIN_EVENT_CALLBACK(on_metadata_change), tag_cache_);
  const int lifecycle_watch = watch_domains(raw, VIR_DOMAIN_EVENT_ID_LIFECYCLE,
                                            VIR_DOMAIN_EVENT_CALLBACK(on_lifecycle), tag_cache_);
  tag_cache_usable_ = metadata_watch >= 0 && lifecycle_watch >= 0;
  return ConnectionPtr(raw, [metadata_watch, lifecycle_watch, closed](virConnectPtr conn) {
    for (const int watch : {metadata_watch, lifecycle_watch}) {
      if (watch >= 0) {
        virConnectDomainEventDeregisterAny(conn, watch);
      }
    }
    virConnectUnregisterCloseCallback(conn, close_callback);
    virConnectClose(conn);
  });
}

void LibvirtHypervisor::forget_connection(const ConnectionPtr& broken) {
  std::lock_guard lock(connection_mutex_);
  if (connection_ == broken) {
    connection_.reset();
  }
}

Domain LibvirtHypervisor::describe_with_tags(virDomainPtr domain) {
  const auto identity = identity_of(domain);
  return describe(domain, identity,
                  tags_of(domain, identity.raw_uuid, identity.name).value_or(Tags{}),
                  WithAddresses::yes);
}

std::optional<Tags> LibvirtHypervisor::tags_of(virDomainPtr domain, const std::string& raw_uuid,
                                               const std::string& name) {
  if (tag_cache_usable_) {
    if (auto cached = tag_cache_->find(raw_uuid, name)) {
      return *cached;
    }
  }
  auto tags = read_tags(domain);
  if (tag_cache_usable_) {
    tag_cache_->store(raw_uuid, name, tags);
  }
  return tags;
}

VirtType LibvirtHypervisor::virt_type_for(GuestArch arch) const {
  const auto it = virt_types_.find(arch);
  if (it == virt_types_.end()) {
    throw HypervisorError(Kind::unsupported, "libvirt at " + options_.uri + " cannot run " +
                                                 std::string(to_string(arch)) + " guests");
  }
  return it->second;
}

std::string LibvirtHypervisor::domain_xml(const DomainSpec& spec) const {
  return render_domain_xml(spec, virt_type_for(spec.arch));
}

Domain LibvirtHypervisor::define(const DomainSpec& spec) {
  auto xml = domain_xml(spec);
  return call("define domain " + spec.name,
              [xml = std::move(xml), name = spec.name, tags = spec.tags](virConnectPtr conn) {
                if (DomainHandle existing{virDomainLookupByName(conn, name.c_str())}) {
                  throw HypervisorError(Kind::already_exists, "domain " + name + " already exists");
                }
                if (!last_error_is(VIR_ERR_NO_DOMAIN)) {
                  throw_libvirt_error("look up domain " + name);
                }
                DomainHandle domain(virDomainDefineXML(conn, xml.c_str()));
                if (!domain) {
                  throw_libvirt_error("define domain " + name);
                }
                return describe(domain.get(), identity_of(domain.get()), tags, WithAddresses::no);
              });
}

void LibvirtHypervisor::start(std::string_view uuid) {
  call("start domain " + std::string(uuid), [uuid = std::string(uuid)](virConnectPtr conn) {
    auto domain = require_uuid(conn, uuid);
    if (!is_active(domain.get()) && virDomainCreate(domain.get()) < 0 && !is_active(domain.get())) {
      throw_libvirt_error("start domain " + uuid);
    }
  });
}

void LibvirtHypervisor::shutdown(std::string_view uuid, std::chrono::milliseconds grace) {
  call_within(options_.call_timeout + grace, "shut down domain " + std::string(uuid),
              [uuid = std::string(uuid), grace](virConnectPtr conn) {
                auto domain = require_uuid(conn, uuid);
                if (!is_active(domain.get())) {
                  return;
                }
                if (virDomainShutdown(domain.get()) < 0) {
                  virResetLastError();  // no ACPI: fall through to a hard power-off
                }
                const auto give_up = std::chrono::steady_clock::now() + grace;
                while (is_active(domain.get()) && std::chrono::steady_clock::now() < give_up) {
                  std::this_thread::sleep_for(std::chrono::milliseconds(100));
                }
                if (is_active(domain.get()) && virDomainDestroy(domain.get()) < 0 &&
                    is_active(domain.get())) {
                  throw_libvirt_error("power off domain " + uuid);
                }
              });
}

bool LibvirtHypervisor::destroy(std::string_view uuid) {
  return call("destroy domain " + std::string(uuid),
              [uuid = std::string(uuid)](virConnectPtr conn) {
                auto domain = lookup_uuid(conn, uuid);
                if (!domain || !is_active(domain.get())) {
                  return false;
                }
                if (virDomainDestroy(domain.get()) < 0 && is_active(domain.get())) {
                  throw_libvirt_error("destroy domain " + uuid);
                }
                return true;
              });
}

bool LibvirtHypervisor::undefine(std::string_view uuid) {
  return call("undefine domain " + std::string(uuid),
              [uuid = std::string(uuid)](virConnectPtr conn) {
                auto domain = lookup_uuid(conn, uuid);
                if (!domain) {
                  return false;
                }
                constexpr unsigned kAllState = VIR_DOMAIN_UNDEFINE_MANAGED_SAVE |
                                               VIR_DOMAIN_UNDEFINE_SNAPSHOTS_METADATA |
                                               VIR_DOMAIN_UNDEFINE_CHECKPOINTS_METADATA |
                                               VIR_DOMAIN_UNDEFINE_NVRAM | VIR_DOMAIN_UNDEFINE_TPM;
                constexpr unsigned kBasicState =
                    VIR_DOMAIN_UNDEFINE_MANAGED_SAVE | VIR_DOMAIN_UNDEFINE_SNAPSHOTS_METADATA;
                if (virDomainUndefineFlags(domain.get(), kAllState) == 0) {
                  return true;
                }
                // Drivers without NVRAM or TPM support (the test driver) refuse those flags.
                const bool flags_refused =
                    last_error_is(VIR_ERR_INVALID_ARG) || last_error_is(VIR_ERR_NO_SUPPORT);
                if (!flags_refused || virDomainUndefineFlags(domain.get(), kBasicState) < 0) {
                  throw_libvirt_error("undefine domain " + uuid);
                }
                return true;
              });
}

std::optional<Domain> LibvirtHypervisor::find_by_uuid(std::string_view uuid) {
  return call(
      "find domain " + std::string(uuid), [this, uuid = std::string(uuid)](virConnectPtr conn) {
        auto domain = lookup_uuid(conn, uuid);
        return domain ? std::optional<Domain>(describe_with_tags(domain.get())) : std::nullopt;
      });
}

std::optional<Domain> LibvirtHypervisor::find_by_name(std::string_view name) {
  return call(
      "find domain " + std::string(name), [this, name = std::string(name)](virConnectPtr conn) {
        DomainHandle domain(virDomainLookupByName(conn, name.c_str()));
        if (!domain && !last_error_is(VIR_ERR_NO_DOMAIN)) {
          throw_libvirt_error("look up domain " + name);
        }
        return domain ? std::optional<Domain>(describe_with_tags(domain.get())) : std::nullopt;
      });
}

std::vector<Domain> LibvirtHypervisor::list(const Tags& filter) {
  return call("list domains", [this, filter](virConnectPtr conn) {
    virDomainPtr* raw = nullptr;
    const int count = virConnectListAllDomains(conn, &raw, 0);
    if (count < 0) {
      throw_libvirt_error("list domains");
    }
    std::vector<DomainHandle> all;
    all.reserve(static_cast<std::size_t>(count));
    for (int i = 0; i < count; ++i) {
      all.emplace_back(raw[i]);
    }
    std::free(raw);

    std::vector<Domain> matching;
    for (const auto& domain : all) {
      try {
        const auto identity = identity_of(domain.get());
        auto tags = tags_of(domain.get(), identity.raw_uuid, identity.name);
        if (!tags || !tags->matches(filter)) {
          continue;
        }
        matching.push_back(describe(domain.get(), identity, std::move(*tags), WithAddresses::no));
      } catch (const HypervisorError& e) {
        if (e.kind() != Kind::not_found) {
          throw;
        }
        // undefined between the listing and this read: it is gone, so it is not in the list
      }
    }
    return matching;
  });
}

std::vector<std::string> LibvirtHypervisor::disk_paths(std::string_view uuid) {
  return call("read disks of domain " + std::string(uuid),
              [uuid = std::string(uuid)](virConnectPtr conn) {
                auto domain = require_uuid(conn, uuid);
                CString xml(virDomainGetXMLDesc(domain.get(), VIR_DOMAIN_XML_INACTIVE));
                if (!xml) {
                  throw_libvirt_error("read XML of domain " + uuid);
                }
                return parse_disk_paths(xml.get());
              });
}

Volume LibvirtHypervisor::create_overlay(const VolumeSpec& spec) {
  auto xml = render_overlay_volume_xml(spec);
  return call("create volume " + spec.name, [xml = std::move(xml), spec](virConnectPtr conn) {
    auto pool = require_pool(conn, spec.pool);
    if (lookup_volume(pool.get(), spec.name)) {
      throw HypervisorError(Kind::already_exists, "volume " + spec.name + " already exists");
    }
    VolumeHandle volume(virStorageVolCreateXML(pool.get(), xml.c_str(), 0));
    if (!volume) {
      throw_libvirt_error("create volume " + spec.name + " in pool " + spec.pool);
    }
    return Volume{.pool = spec.pool, .name = spec.name, .path = path_of(volume.get())};
  });
}

std::optional<Volume> LibvirtHypervisor::find_volume(std::string_view pool, std::string_view name) {
  return call("find volume " + std::string(name), [pool = std::string(pool),
                                                   name = std::string(name)](virConnectPtr conn) {
    auto pool_handle = require_pool(conn, pool);
    auto volume = lookup_volume(pool_handle.get(), name);
    if (!volume) {
      return std::optional<Volume>();
    }
    return std::optional<Volume>(Volume{.pool = pool, .name = name, .path = path_of(volume.get())});
  });
}

bool LibvirtHypervisor::delete_volume(std::string_view pool, std::string_view name) {
  return call("delete volume " + std::string(name),
              [pool = std::string(pool), name = std::string(name)](virConnectPtr conn) {
                auto pool_handle = require_pool(conn, pool);
                auto volume = lookup_volume(pool_handle.get(), name);
                if (!volume) {
                  return false;
                }
                if (virStorageVolDelete(volume.get(), 0) < 0) {
                  throw_libvirt_error("delete volume " + name);
                }
                return true;
              });
}

std::string LibvirtHypervisor::pool_path(std::string_view pool) {
  return call("read storage pool " + std::string(pool),
              [pool = std::string(pool)](virConnectPtr conn) {
                auto handle = require_pool(conn, pool);
                CString xml(virStoragePoolGetXMLDesc(handle.get(), 0));
                if (!xml) {
                  throw_libvirt_error("read storage pool " + pool);
                }
                return parse_pool_path(xml.get());
              });
}

HostCapacity LibvirtHypervisor::capacity() {
  return call("read host capacity", [](virConnectPtr conn) {
    virNodeInfo info{};
    if (virNodeGetInfo(conn, &info) < 0) {
      throw_libvirt_error("read host capacity");
    }
    return HostCapacity{.cpus = info.cpus, .memory_mib = info.memory / 1024};
  });
}

}  // namespace garm_edge::hypervisor
