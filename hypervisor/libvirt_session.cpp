#include "hypervisor/libvirt_session.hpp"

namespace garm_edge::hypervisor::libvirt {
namespace {

void close_callback(virConnectPtr, int reason, void* opaque) {
  auto* state = static_cast<Session::CloseState*>(opaque);
  if (!state->closed.exchange(true) && state->on_close) {
    state->on_close(reason);
  }
}

std::string describe_close(int reason) {
  switch (reason) {
    case VIR_CONNECT_CLOSE_REASON_EOF:
      return "libvirtd closed the connection (stopped or restarted)";
    case VIR_CONNECT_CLOSE_REASON_KEEPALIVE:
      return "libvirtd stopped answering keepalives";
    case VIR_CONNECT_CLOSE_REASON_ERROR:
      return "the connection failed";
    default:
      return "the connection was closed";
  }
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
  if (connection_ && !closed_->closed.load() && virConnectIsAlive(connection_.get()) == 1) {
    return connection_;
  }
  if (connection_) {
    note_lost(describe_close(VIR_CONNECT_CLOSE_REASON_ERROR));
  }
  connection_.reset();
  try {
    connection_ = open();
  } catch (const std::exception& e) {
    note_failed(e.what());
    throw;
  }
  note_opened();
  return connection_;
}

void Session::forget(const ConnectionPtr& broken, const std::string& why) {
  std::lock_guard lock(mutex_);
  if (connection_ == broken) {
    connection_.reset();
    note_lost(why);
  }
}

bool Session::alive() {
  std::unique_lock lock(mutex_, std::try_to_lock);
  if (!lock.owns_lock()) {
    return true;  // someone is opening or checking it right now
  }
  return connection_ && !closed_->closed.load() && virConnectIsAlive(connection_.get()) == 1;
}

std::string Session::last_error() const {
  std::lock_guard lock(state_mutex_);
  return last_error_;
}

void Session::note_lost(const std::string& why) {
  {
    std::lock_guard lock(state_mutex_);
    if (lost_) {
      return;
    }
    lost_ = true;
    lost_at_ = std::chrono::steady_clock::now();
    last_error_ = why;
  }
  if (notice_) {
    notice_(false, "lost the connection to libvirt at " + uri_ + ": " + why +
                       "; calls fail as unavailable until it is back");
  }
}

void Session::note_failed(const std::string& why) {
  std::lock_guard lock(state_mutex_);
  last_error_ = why;
}

void Session::note_opened() {
  std::chrono::steady_clock::duration down{};
  {
    std::lock_guard lock(state_mutex_);
    last_error_.clear();
    if (!lost_) {
      return;
    }
    lost_ = false;
    down = std::chrono::steady_clock::now() - lost_at_;
  }
  if (notice_) {
    const auto tenths = std::chrono::duration_cast<std::chrono::milliseconds>(down).count() / 100;
    notice_(true, "reconnected to libvirt at " + uri_ + " after " + std::to_string(tenths / 10) +
                      "." + std::to_string(tenths % 10) + " s");
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
  auto closed = std::make_shared<CloseState>();
  // The session outlives its connections' callbacks: the deleter below unregisters this one
  // before the connection closes, and every call holding a connection holds the session too.
  closed->on_close = [this](int reason) { note_lost(describe_close(reason)); };
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
    closed->on_close = nullptr;
    closed->closed.store(true);
    virConnectClose(conn);
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
