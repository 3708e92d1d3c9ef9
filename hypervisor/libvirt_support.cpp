#include "hypervisor/libvirt_support.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <set>

#include <pugixml.hpp>

#include "common/durable_file.hpp"
#include "common/hex.hpp"
#include "hypervisor/domain_xml.hpp"

namespace garm_edge::hypervisor::libvirt {

using Kind = HypervisorError::Kind;

Kind classify(const virError& error) {
  const bool remote = error.domain == VIR_FROM_RPC || error.domain == VIR_FROM_REMOTE;
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
    case VIR_ERR_RPC:
    case VIR_ERR_NO_CONNECT:
    case VIR_ERR_INVALID_CONN:
    case VIR_ERR_AUTH_FAILED:
      return Kind::unavailable;
    case VIR_ERR_SYSTEM_ERROR:
    case VIR_ERR_INTERNAL_ERROR:
      // A lost socket; the same codes from a local driver (EACCES, ENOSPC) are plain failures.
      return remote ? Kind::unavailable : Kind::failed;
    default:
      return Kind::failed;
  }
}

Failure Failure::capture() {
  Failure failure;
  if (const virError* error = virGetLastError(); error != nullptr) {
    failure.code = error->code;
    failure.kind = classify(*error);
    failure.message = error->message != nullptr ? error->message : "";
  }
  if (failure.message.empty()) {
    failure.message = "unknown libvirt error";
  }
  virResetLastError();
  return failure;
}

void Failure::raise(const std::string& what) const {
  throw HypervisorError(kind, what + ": " + message);
}

void throw_last_error(const std::string& what) {
  Failure::capture().raise(what);
}

DomainHandle lookup_uuid(virConnectPtr conn, const std::string& uuid) {
  DomainHandle domain(virDomainLookupByUUIDString(conn, uuid.c_str()));
  if (!domain) {
    const auto failure = Failure::capture();
    if (failure.code != VIR_ERR_NO_DOMAIN) {
      failure.raise("look up domain " + uuid);
    }
  }
  return domain;
}

DomainHandle lookup_name(virConnectPtr conn, const std::string& name) {
  DomainHandle domain(virDomainLookupByName(conn, name.c_str()));
  if (!domain) {
    const auto failure = Failure::capture();
    if (failure.code != VIR_ERR_NO_DOMAIN) {
      failure.raise("look up domain " + name);
    }
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
    throw_last_error("read domain state");
  }
  return active == 1;
}

PowerState state_of(virDomainPtr domain) {
  int state = 0;
  int reason = 0;
  if (virDomainGetState(domain, &state, &reason, 0) < 0) {
    throw_last_error("read domain state");
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

Identity identity_of(virDomainPtr domain) {
  unsigned char uuid[VIR_UUID_BUFLEN] = {};
  const char* name = virDomainGetName(domain);
  if (name == nullptr || virDomainGetUUID(domain, uuid) < 0) {
    throw_last_error("read domain identity");
  }
  return Identity{name, std::string(reinterpret_cast<const char*>(uuid), sizeof uuid)};
}

std::string format_uuid(std::string_view raw_uuid) {
  std::array<unsigned char, 16> bytes{};
  std::memcpy(bytes.data(), raw_uuid.data(), std::min(raw_uuid.size(), bytes.size()));
  return garm_edge::format_uuid(bytes);
}

std::optional<Tags> read_tags(virDomainPtr domain) {
  const std::string ns(kMetadataNamespace);
  CString xml(virDomainGetMetadata(domain, VIR_DOMAIN_METADATA_ELEMENT, ns.c_str(), 0));
  if (!xml) {
    const auto failure = Failure::capture();
    if (failure.code == VIR_ERR_NO_DOMAIN_METADATA) {
      return std::nullopt;
    }
    failure.raise("read domain metadata");
  }
  try {
    return parse_tags_metadata(xml.get());
  } catch (const HypervisorError&) {
    return std::nullopt;  // not something we wrote: not ours
  }
}

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

PoolHandle require_pool(virConnectPtr conn, const std::string& pool) {
  PoolHandle handle(virStoragePoolLookupByName(conn, pool.c_str()));
  if (!handle) {
    throw_last_error("look up storage pool " + pool);
  }
  return handle;
}

VolumeHandle lookup_volume(virStoragePoolPtr pool, const std::string& name) {
  VolumeHandle volume(virStorageVolLookupByName(pool, name.c_str()));
  if (!volume) {
    const auto failure = Failure::capture();
    if (failure.code != VIR_ERR_NO_STORAGE_VOL) {
      failure.raise("look up volume " + name);
    }
  }
  return volume;
}

std::string path_of(virStorageVolPtr volume) {
  CString path(virStorageVolGetPath(volume));
  if (!path) {
    throw_last_error("read volume path");
  }
  return path.get();
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

bool kvm_offers_nested(const std::filesystem::path& kernel_modules) {
  for (const char* module : {"kvm_intel", "kvm_amd"}) {
    std::optional<std::string> flag;
    try {
      flag = read_file(kernel_modules / module / "parameters" / "nested");
    } catch (const std::exception&) {
      continue;  // unreadable: not offered
    }
    if (flag && !flag->empty() &&
        (flag->front() == 'Y' || flag->front() == 'y' || flag->front() == '1')) {
      return true;
    }
  }
  return false;
}

}  // namespace garm_edge::hypervisor::libvirt
