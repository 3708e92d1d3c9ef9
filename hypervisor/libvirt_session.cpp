#include "hypervisor/libvirt_session.hpp"

namespace garm_edge::hypervisor::libvirt {
namespace {

void close_callback(virConnectPtr, int reason, void* opaque) noexcept {
  auto* state = static_cast<Session::CloseState*>(opaque);
  try {
    if (!state->closed.exchange(true) && state->on_close) {
      state->on_close(state->generation, reason);
    }
  } catch (...) {
    // runs inside libvirt's C code: nothing may unwind through it
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

Session::~Session() {
  silence();
  std::lock_guard lock(mutex_);
  connection_.reset();
}

bool Session::usable() const {
  return connection_ && !close_state_->closed.load() && virConnectIsAlive(connection_.get()) == 1;
}

ConnectionPtr Session::connection() {
  ConnectionPtr dead;
  std::uint64_t dead_generation = 0;
  {
    std::lock_guard lock(mutex_);
    if (usable()) {
      return connection_;
    }
    dead = std::move(connection_);
    dead_generation = generation_;
  }
  if (dead) {
    note_lost(dead_generation, describe_close(VIR_CONNECT_CLOSE_REASON_ERROR));
    dead.reset();
  }
  const auto generation = next_generation_.fetch_add(1);
  Opened fresh = open(generation);  // throws: the caller's call fails as unavailable
  {
    std::lock_guard lock(mutex_);
    if (usable()) {
      return connection_;  // another caller opened one meanwhile; ours closes on the way out
    }
    connection_ = fresh.connection;
    close_state_ = fresh.close_state;
    generation_ = generation;
  }
  note_opened();
  return fresh.connection;
}

void Session::forget(const ConnectionPtr& broken, const std::string& why) {
  ConnectionPtr dropped;
  std::uint64_t generation = 0;
  {
    std::lock_guard lock(mutex_);
    if (connection_ != broken) {
      return;
    }
    dropped = std::move(connection_);
    generation = generation_;
  }
  note_lost(generation, why);
}

bool Session::alive() {
  std::unique_lock lock(mutex_, std::try_to_lock);
  return !lock.owns_lock() || usable();  // busy: someone is checking or replacing it now
}

void Session::silence() {
  std::lock_guard lock(notice_mutex_);
  notice_ = nullptr;
}

void Session::notify(bool connected, const std::string& message) {
  std::lock_guard lock(notice_mutex_);
  if (notice_) {
    notice_(connected, message);
  }
}

void Session::note_lost(std::uint64_t generation, const std::string& why) {
  {
    std::lock_guard lock(state_mutex_);
    if (lost_ || generation < lost_generation_) {
      return;
    }
    {
      std::lock_guard current(mutex_);
      if (generation != generation_) {
        return;  // an older connection's late news
      }
    }
    lost_ = true;
    lost_generation_ = generation;
    lost_at_ = std::chrono::steady_clock::now();
  }
  notify(false, "lost the connection to libvirt at " + uri_ + ": " + why +
                    "; calls fail as unavailable until it is back");
}

void Session::note_opened() {
  std::chrono::steady_clock::duration down{};
  {
    std::lock_guard lock(state_mutex_);
    if (!lost_) {
      return;
    }
    lost_ = false;
    down = std::chrono::steady_clock::now() - lost_at_;
  }
  const auto tenths = std::chrono::duration_cast<std::chrono::milliseconds>(down).count() / 100;
  notify(true, "reconnected to libvirt at " + uri_ + " after " + std::to_string(tenths / 10) + "." +
                   std::to_string(tenths % 10) + " s");
}

Session::Opened Session::open(std::uint64_t generation) {
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
  closed->generation = generation;
  // The session outlives its connections' callbacks: the deleter below unregisters this one
  // before the connection closes, and every call holding a connection holds the session too.
  closed->on_close = [this](std::uint64_t closed_generation, int reason) {
    note_lost(closed_generation, describe_close(reason));
  };
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
  ConnectionPtr connection(raw, [metadata_watch, lifecycle_watch, closed](virConnectPtr conn) {
    for (const int watch : {metadata_watch, lifecycle_watch}) {
      if (watch >= 0) {
        virConnectDomainEventDeregisterAny(conn, watch);
      }
    }
    // libvirt runs close callbacks under the lock this takes: none is running once it returns.
    virConnectUnregisterCloseCallback(conn, close_callback);
    closed->closed.store(true);
    virConnectClose(conn);
  });
  return {.connection = std::move(connection), .close_state = std::move(closed)};
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
