#include "agent/guests/agent_sockets.hpp"

#include <cstdint>
#include <sys/eventfd.h>
#include <unistd.h>

namespace garm_edge::agent {

AgentSockets::~AgentSockets() {
  std::lock_guard lock(mutex_);
  for (const auto& socket : sockets_) {
    signal(*socket);
  }
  for (const auto& socket : sockets_) {
    socket->thread.join();
  }
  sockets_.clear();
}

void AgentSockets::signal(const Socket& socket) {
  const std::uint64_t one = 1;
  [[maybe_unused]] const auto ignored = ::write(socket.stop.get(), &one, sizeof one);
}

void AgentSockets::carry(const std::string& domain_name, const std::string& instance_name,
                         std::shared_ptr<net::WebSocketTunnel> tunnel, UniqueFd guest,
                         std::string early_bytes, const std::function<bool()>& admitted) {
  std::lock_guard lock(mutex_);
  reap();
  if (!admitted()) {
    return;  // deleted since its upgrade was checked
  }
  std::size_t alive = 0;
  for (auto it = sockets_.rbegin(); it != sockets_.rend(); ++it) {
    if ((*it)->domain_name == domain_name && !(*it)->done && ++alive >= options_.per_instance) {
      signal(**it);  // the oldest beyond the newest per_instance - 1
    }
  }
  auto socket = std::make_unique<Socket>(domain_name);
  if (socket->stop.get() < 0) {
    log_.warning("agent socket for " + instance_name + " not opened: no eventfd");
    return;
  }
  auto* state = socket.get();
  try {
    socket->thread =
        std::thread([this, state, instance_name, tunnel = std::move(tunnel),
                     guest = std::move(guest), early_bytes = std::move(early_bytes)]() mutable {
          const auto end = tunnel->splice(guest.get(), std::move(early_bytes), options_.idle,
                                          options_.stall, state->stop.get());
          tunnel.reset();  // garm sees the close now, not when the thread is joined
          ::close(guest.release());
          log_.info("agent socket for " + instance_name +
                    " closed: " + std::string(net::to_string(end)));
          state->done = true;
        });
  } catch (const std::system_error& e) {
    log_.warning("agent socket for " + instance_name + " not opened: " + e.what());
    return;  // no thread (e.g. the task limit): the guest's socket closes, it will redial
  }
  log_.info("agent socket for " + instance_name + " opened");
  sockets_.push_back(std::move(socket));
}

void AgentSockets::close_instance(std::string_view domain_name) {
  std::lock_guard lock(mutex_);
  for (const auto& socket : sockets_) {
    if (socket->domain_name == domain_name) {
      signal(*socket);
    }
  }
  reap();
}

std::size_t AgentSockets::open(std::string_view domain_name) const {
  std::lock_guard lock(mutex_);
  std::size_t count = 0;
  for (const auto& socket : sockets_) {
    count += socket->domain_name == domain_name && !socket->done ? 1U : 0U;
  }
  return count;
}

std::size_t AgentSockets::open() const {
  std::lock_guard lock(mutex_);
  std::size_t count = 0;
  for (const auto& socket : sockets_) {
    count += socket->done ? 0U : 1U;
  }
  return count;
}

void AgentSockets::reap() {
  for (auto it = sockets_.begin(); it != sockets_.end();) {
    if ((*it)->done) {
      (*it)->thread.join();
      it = sockets_.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace garm_edge::agent
