#include "hypervisor/libvirt_session.hpp"

namespace garm_edge::hypervisor::libvirt {
namespace {

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
  } else {
    virResetLastError();
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

}  // namespace

ConnectionPtr Session::connection() {
  std::lock_guard lock(mutex_);
  if (connection_ && !closed_->load() && virConnectIsAlive(connection_.get()) == 1) {
    return connection_;
  }
  connection_ = open();
  return connection_;
}

void Session::forget(const ConnectionPtr& broken) {
  std::lock_guard lock(mutex_);
  if (connection_ == broken) {
    connection_.reset();
  }
}

ConnectionPtr Session::open() {
  virConnectPtr raw = virConnectOpen(uri_.c_str());
  if (raw == nullptr) {
    throw_last_error("connect to libvirt at " + uri_);
  }
  // Remote connections notice a dead or frozen daemon through keepalive; drivers without a
  // socket (test, embed) answer "unsupported", which is fine.
  constexpr int kKeepAliveIntervalS = 5;
  constexpr unsigned kKeepAliveCount = 3;
  if (virConnectSetKeepAlive(raw, kKeepAliveIntervalS, kKeepAliveCount) < 0) {
    virResetLastError();
  }
  // Drivers without a persistent connection accept the close callback but never keep it (nor
  // call a free function), so the flag is owned by the connection's deleter and libvirt only
  // borrows it until the callback is unregistered.
  auto closed = std::make_shared<std::atomic<bool>>(false);
  closed_ = closed;
  if (virConnectRegisterCloseCallback(raw, close_callback, closed.get(), nullptr) < 0) {
    virResetLastError();
  }
  // Events missed while disconnected cannot be replayed: start the cache afresh.
  cache_->clear();
  const int metadata_watch = watch_domains(raw, VIR_DOMAIN_EVENT_ID_METADATA_CHANGE,
                                           VIR_DOMAIN_EVENT_CALLBACK(on_metadata_change), cache_);
  const int lifecycle_watch = watch_domains(raw, VIR_DOMAIN_EVENT_ID_LIFECYCLE,
                                            VIR_DOMAIN_EVENT_CALLBACK(on_lifecycle), cache_);
  cache_usable_ = metadata_watch >= 0 && lifecycle_watch >= 0;
  return ConnectionPtr(raw, [metadata_watch, lifecycle_watch, closed](virConnectPtr conn) {
    for (const int watch : {metadata_watch, lifecycle_watch}) {
      if (watch >= 0) {
        virConnectDomainEventDeregisterAny(conn, watch);
      }
    }
    virConnectUnregisterCloseCallback(conn, close_callback);
    virConnectClose(conn);
    closed->store(true);
  });
}

std::optional<Tags> Session::tags_of(virDomainPtr domain, const Identity& identity) {
  if (!cache_usable_) {
    return read_tags(domain);
  }
  if (auto cached = cache_->find(identity.raw_uuid, identity.name)) {
    return *cached;
  }
  const auto epoch = cache_->epoch();
  auto tags = read_tags(domain);
  cache_->store(identity.raw_uuid, identity.name, tags, epoch);
  return tags;
}

}  // namespace garm_edge::hypervisor::libvirt
