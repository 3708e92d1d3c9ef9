#include "hypervisor/libvirt_hypervisor.hpp"

#include <array>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>

#include "hypervisor/domain_xml.hpp"
#include "hypervisor/libvirt_call.hpp"
#include "hypervisor/libvirt_event_loop.hpp"
#include "hypervisor/libvirt_session.hpp"
#include "hypervisor/libvirt_support.hpp"

namespace garm_edge::hypervisor {

using namespace libvirt;
using Kind = HypervisorError::Kind;

namespace {

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

std::optional<Domain> describe_found(Session& session, const DomainHandle& domain) {
  if (!domain) {
    return std::nullopt;
  }
  const auto identity = identity_of(domain.get());
  return describe(domain.get(), identity, session.tags_of(domain.get(), identity).value_or(Tags{}),
                  WithAddresses::yes);
}

constexpr std::array kArchitectures{GuestArch::x86_64, GuestArch::aarch64, GuestArch::armv7l};
/// Beyond the usual deadline, for writing a guest's memory out or reading it back: a few GiB at
/// disk speed, slower on a loaded host.
constexpr std::chrono::seconds kMemoryStateGrace{300};

}  // namespace

/// Every interval, on its own thread: reopens a lost connection, or asks the daemon for its
/// version. Health is read from the last answer, so /healthz costs no libvirt call and does not
/// queue behind slow commands. Everything the thread touches is shared, so at shutdown a thread
/// stuck in a call to a frozen daemon is left behind rather than waited for.
class LibvirtHypervisor::ConnectionMonitor {
 public:
  ConnectionMonitor(std::shared_ptr<Session> session, std::chrono::milliseconds interval)
      : state_(std::make_shared<State>()), interval_(interval) {
    state_->last_answer = std::chrono::steady_clock::now();
    thread_ = std::thread([state = state_, session = std::move(session), interval] {
      watch(*state, *session, interval);
    });
  }
  ~ConnectionMonitor() {
    std::unique_lock lock(state_->mutex);
    state_->stopping = true;
    state_->wake.notify_all();
    constexpr auto kGrace = std::chrono::seconds(2);
    if (state_->wake.wait_for(lock, kGrace, [this] { return state_->finished; })) {
      lock.unlock();
      thread_.join();
    } else {
      thread_.detach();  // stuck in libvirt; it owns what it uses
    }
  }
  ConnectionMonitor(const ConnectionMonitor&) = delete;
  ConnectionMonitor& operator=(const ConnectionMonitor&) = delete;

  HypervisorHealth health(const std::string& uri) const {
    std::lock_guard lock(state_->mutex);
    const auto silent = std::chrono::steady_clock::now() - state_->last_answer;
    if (silent <= 3 * interval_) {
      return {};
    }
    const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(silent).count();
    return {.reachable = false,
            .detail = "libvirt at " + uri + " has not answered for " + std::to_string(seconds) +
                      " s" + (state_->last_error.empty() ? "" : ": " + state_->last_error)};
  }

 private:
  struct State {
    std::mutex mutex;
    std::condition_variable wake;
    bool stopping = false;
    bool finished = false;
    std::chrono::steady_clock::time_point last_answer;
    std::string last_error;
  };

  static void watch(State& state, Session& session, std::chrono::milliseconds interval) {
    std::unique_lock lock(state.mutex);
    while (!state.wake.wait_for(lock, interval, [&state] { return state.stopping; })) {
      lock.unlock();
      std::string error = ask_version(session);
      lock.lock();
      if (error.empty()) {
        state.last_answer = std::chrono::steady_clock::now();
      }
      state.last_error = std::move(error);
    }
    state.finished = true;
    state.wake.notify_all();
  }

  /// Empty when the daemon answered; else why not (and a broken connection is dropped).
  static std::string ask_version(Session& session) {
    try {
      const auto conn = session.connection();
      unsigned long version = 0;
      if (virConnectGetLibVersion(conn.get(), &version) < 0) {
        const auto failure = Failure::capture();
        if (failure.kind == Kind::unavailable) {
          session.forget(conn, failure.message);
        }
        return failure.message;
      }
      return "";
    } catch (const std::exception& e) {
      return e.what();
    }
  }

  std::shared_ptr<State> state_;
  std::chrono::milliseconds interval_;
  std::thread thread_;
};

LibvirtHypervisor::LibvirtHypervisor(LibvirtOptions options)
    : options_(std::move(options)),
      session_(std::make_shared<Session>(options_.uri, options_.on_connection_change)),
      runner_(options_.workers) {
  ensure_libvirt_event_loop();
  const auto caps = call("read capabilities of " + options_.uri, [](Session&, virConnectPtr conn) {
    CString xml(virConnectGetCapabilities(conn));
    if (!xml) {
      throw_last_error("read host capabilities");
    }
    return std::string(xml.get());
  });
  virt_types_ = virt_types_from_capabilities(caps);
  // A module parameter, fixed until the module is reloaded: read once, not on every capacity
  // answer.
  nested_virtualization_ = kvm_offers_nested(options_.kernel_modules);
  monitor_ = std::make_unique<ConnectionMonitor>(session_, options_.reconnect_interval);
  if (options_.virt_type) {
    for (auto arch : kArchitectures) {
      virt_types_[arch] = *options_.virt_type;
    }
  }
}

LibvirtHypervisor::~LibvirtHypervisor() {
  session_->silence();  // whoever logs our notices may be gone before detached calls finish
}

HypervisorHealth LibvirtHypervisor::health() {
  return monitor_->health(options_.uri);
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
  const auto type = virt_type_for(spec.arch);
  return render_domain_xml(spec, spec.emulated && type == VirtType::kvm ? VirtType::qemu : type);
}

Domain LibvirtHypervisor::define(const DomainSpec& spec) {
  auto xml = domain_xml(spec);
  return call("define domain " + spec.name, [xml = std::move(xml), name = spec.name,
                                             tags = spec.tags](Session&, virConnectPtr conn) {
    if (lookup_name(conn, name)) {
      throw HypervisorError(Kind::already_exists, "domain " + name + " already exists");
    }
    DomainHandle domain(virDomainDefineXML(conn, xml.c_str()));
    if (!domain) {
      throw_last_error("define domain " + name);
    }
    return describe(domain.get(), identity_of(domain.get()), tags, WithAddresses::no);
  });
}

void LibvirtHypervisor::start(std::string_view uuid) {
  call("start domain " + std::string(uuid),
       [uuid = std::string(uuid)](Session&, virConnectPtr conn) {
         auto domain = require_uuid(conn, uuid);
         if (is_active(domain.get())) {
           return;
         }
         if (virDomainCreate(domain.get()) < 0) {
           const auto failure = Failure::capture();
           if (!is_active(domain.get())) {  // not a race with another start
             failure.raise("start domain " + uuid);
           }
         }
       });
}

void LibvirtHypervisor::shutdown(std::string_view uuid, std::chrono::milliseconds grace) {
  call_within(options_.call_timeout + grace, "shut down domain " + std::string(uuid),
              [uuid = std::string(uuid), grace](Session&, virConnectPtr conn) {
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
                if (is_active(domain.get()) && virDomainDestroy(domain.get()) < 0) {
                  const auto failure = Failure::capture();
                  if (is_active(domain.get())) {
                    failure.raise("power off domain " + uuid);
                  }
                }
              });
}

bool LibvirtHypervisor::destroy(std::string_view uuid) {
  return call("destroy domain " + std::string(uuid),
              [uuid = std::string(uuid)](Session&, virConnectPtr conn) {
                auto domain = lookup_uuid(conn, uuid);
                if (!domain || !is_active(domain.get())) {
                  return false;
                }
                if (virDomainDestroy(domain.get()) < 0) {
                  const auto failure = Failure::capture();
                  if (is_active(domain.get())) {
                    failure.raise("destroy domain " + uuid);
                  }
                }
                return true;
              });
}

bool LibvirtHypervisor::undefine(std::string_view uuid) {
  return call("undefine domain " + std::string(uuid),
              [uuid = std::string(uuid)](Session&, virConnectPtr conn) {
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
                const auto refused = Failure::capture();
                if (refused.code != VIR_ERR_INVALID_ARG && refused.code != VIR_ERR_NO_SUPPORT) {
                  refused.raise("undefine domain " + uuid);
                }
                if (virDomainUndefineFlags(domain.get(), kBasicState) < 0) {
                  throw_last_error("undefine domain " + uuid);
                }
                return true;
              });
}

void LibvirtHypervisor::save(std::string_view uuid, const std::string& path) {
  call_within(options_.call_timeout + kMemoryStateGrace, "save domain " + std::string(uuid),
              [uuid = std::string(uuid), path](Session&, virConnectPtr conn) {
                auto domain = require_uuid(conn, uuid);
                if (virDomainSaveFlags(domain.get(), path.c_str(), nullptr, 0) < 0) {
                  throw_last_error("save domain " + uuid + " to " + path);
                }
              });
}

void LibvirtHypervisor::restore(const std::string& path) {
  call_within(options_.call_timeout + kMemoryStateGrace, "restore a domain from " + path,
              [path](Session&, virConnectPtr conn) {
                if (virDomainRestoreFlags(conn, path.c_str(), nullptr, 0) < 0) {
                  throw_last_error("restore a domain from " + path);
                }
              });
}

std::optional<Domain> LibvirtHypervisor::find_by_uuid(std::string_view uuid) {
  return call("find domain " + std::string(uuid),
              [uuid = std::string(uuid)](Session& session, virConnectPtr conn) {
                return describe_found(session, lookup_uuid(conn, uuid));
              });
}

std::optional<Domain> LibvirtHypervisor::find_by_name(std::string_view name) {
  return call("find domain " + std::string(name),
              [name = std::string(name)](Session& session, virConnectPtr conn) {
                return describe_found(session, lookup_name(conn, name));
              });
}

std::vector<Domain> LibvirtHypervisor::list(const Tags& filter) {
  return call("list domains", [filter](Session& session, virConnectPtr conn) {
    virDomainPtr* raw = nullptr;
    const int count = virConnectListAllDomains(conn, &raw, 0);
    if (count < 0) {
      throw_last_error("list domains");
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
        auto tags = session.tags_of(domain.get(), identity);
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

void LibvirtHypervisor::set_tags(std::string_view uuid, const Tags& tags) {
  auto element = tags_metadata_element(tags);
  call("set the tags of domain " + std::string(uuid),
       [uuid = std::string(uuid), element = std::move(element)](Session& session,
                                                                virConnectPtr conn) {
         auto domain = require_uuid(conn, uuid);
         unsigned where = VIR_DOMAIN_AFFECT_CONFIG;
         if (is_active(domain.get())) {
           where |= VIR_DOMAIN_AFFECT_LIVE;
         }
         const std::string prefix(kMetadataPrefix);
         const std::string ns(kMetadataNamespace);
         if (virDomainSetMetadata(domain.get(), VIR_DOMAIN_METADATA_ELEMENT, element.c_str(),
                                  prefix.c_str(), ns.c_str(), where) < 0) {
           const auto failure = Failure::capture();  // before any other libvirt call
           session.forget_tags(identity_of(domain.get()));
           failure.raise("set the tags of domain " + uuid);
         }
         session.forget_tags(identity_of(domain.get()));
       });
}

std::vector<std::string> LibvirtHypervisor::disk_paths(std::string_view uuid) {
  return call("read disks of domain " + std::string(uuid),
              [uuid = std::string(uuid)](Session&, virConnectPtr conn) {
                auto domain = require_uuid(conn, uuid);
                CString xml(virDomainGetXMLDesc(domain.get(), VIR_DOMAIN_XML_INACTIVE));
                if (!xml) {
                  throw_last_error("read XML of domain " + uuid);
                }
                return parse_disk_paths(xml.get());
              });
}

Volume LibvirtHypervisor::create_overlay(const VolumeSpec& spec) {
  auto xml = render_overlay_volume_xml(spec);
  return call(
      "create volume " + spec.name, [xml = std::move(xml), spec](Session&, virConnectPtr conn) {
        auto pool = require_pool(conn, spec.pool);
        if (lookup_volume(pool.get(), spec.name)) {
          throw HypervisorError(Kind::already_exists, "volume " + spec.name + " already exists");
        }
        VolumeHandle volume(virStorageVolCreateXML(pool.get(), xml.c_str(), 0));
        if (!volume) {
          throw_last_error("create volume " + spec.name + " in pool " + spec.pool);
        }
        return Volume{.pool = spec.pool, .name = spec.name, .path = path_of(volume.get())};
      });
}

std::optional<Volume> LibvirtHypervisor::find_volume(std::string_view pool, std::string_view name) {
  return call("find volume " + std::string(name),
              [pool = std::string(pool), name = std::string(name)](Session&, virConnectPtr conn) {
                auto pool_handle = require_pool(conn, pool);
                auto volume = lookup_volume(pool_handle.get(), name);
                if (!volume) {
                  return std::optional<Volume>();
                }
                return std::optional<Volume>(
                    Volume{.pool = pool, .name = name, .path = path_of(volume.get())});
              });
}

bool LibvirtHypervisor::delete_volume(std::string_view pool, std::string_view name) {
  return call("delete volume " + std::string(name),
              [pool = std::string(pool), name = std::string(name)](Session&, virConnectPtr conn) {
                auto pool_handle = require_pool(conn, pool);
                auto volume = lookup_volume(pool_handle.get(), name);
                if (!volume) {
                  return false;
                }
                if (virStorageVolDelete(volume.get(), 0) < 0) {
                  throw_last_error("delete volume " + name);
                }
                return true;
              });
}

std::vector<std::string> LibvirtHypervisor::list_volumes(std::string_view pool) {
  return call("list volumes of pool " + std::string(pool),
              [pool = std::string(pool)](Session&, virConnectPtr conn) {
                auto pool_handle = require_pool(conn, pool);
                virStorageVolPtr* raw = nullptr;
                const int count = virStoragePoolListAllVolumes(pool_handle.get(), &raw, 0);
                if (count < 0) {
                  throw_last_error("list volumes of pool " + pool);
                }
                std::vector<std::string> names;
                for (int i = 0; i < count; ++i) {
                  VolumeHandle volume(raw[i]);
                  if (const char* name = virStorageVolGetName(volume.get()); name != nullptr) {
                    names.emplace_back(name);
                  }
                }
                std::free(raw);
                return names;
              });
}

std::string LibvirtHypervisor::pool_path(std::string_view pool) {
  return call("read storage pool " + std::string(pool),
              [pool = std::string(pool)](Session&, virConnectPtr conn) {
                auto handle = require_pool(conn, pool);
                CString xml(virStoragePoolGetXMLDesc(handle.get(), 0));
                if (!xml) {
                  throw_last_error("read storage pool " + pool);
                }
                return parse_pool_path(xml.get());
              });
}

HostCapacity LibvirtHypervisor::capacity() {
  auto host = call("read host capacity", [](Session&, virConnectPtr conn) {
    virNodeInfo info{};
    if (virNodeGetInfo(conn, &info) < 0) {
      throw_last_error("read host capacity");
    }
    return HostCapacity{.cpus = info.cpus,
                        .memory_mib = info.memory / 1024,
                        .machine = std::string(info.model, strnlen(info.model, sizeof info.model)),
                        .virt_types = {},
                        .nested_virtualization = false};
  });
  host.virt_types = virt_types_;
  host.nested_virtualization = nested_virtualization_;
  return host;
}

}  // namespace garm_edge::hypervisor
