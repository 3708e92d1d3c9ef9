#include "hub/tunnels.hpp"

#include <algorithm>
#include <iterator>

namespace garm_edge::hub {
namespace {

constexpr std::string_view kHeartbeat =
    "GET /healthz HTTP/1.1\r\nHost: agent\r\nX-Garm-Edge-Heartbeat: 1\r\n\r\n";

std::chrono::milliseconds remaining(std::chrono::steady_clock::time_point deadline) {
  return std::max(std::chrono::milliseconds(1),
                  std::chrono::duration_cast<std::chrono::milliseconds>(
                      deadline - std::chrono::steady_clock::now()));
}

}  // namespace

std::size_t Tunnels::Link::waiting_count() const {
  std::size_t count = 0;
  for (const auto& [client, queue] : waiting) {
    count += queue.size();
  }
  return count;
}

std::size_t Tunnels::Link::waiting_bytes(const std::string& client) const {
  const auto found = waiting.find(client);
  std::size_t bytes = 0;
  for (std::size_t i = 0; found != waiting.end() && i < found->second.size(); ++i) {
    bytes += found->second[i].request.size();
  }
  return bytes;
}

std::optional<Tunnels::Waiter> Tunnels::Link::next_waiter() {
  if (waiting.empty()) {
    return std::nullopt;
  }
  auto turn = waiting.upper_bound(last_served);
  if (turn == waiting.end()) {
    turn = waiting.begin();
  }
  auto waiter = std::move(turn->second.front());
  turn->second.pop_front();
  last_served = turn->first;
  if (turn->second.empty()) {
    waiting.erase(turn);
  }
  return waiter;
}

std::vector<Tunnels::Waiter> Tunnels::Link::take_all_waiting() {
  std::vector<Waiter> all;
  for (auto& [client, queue] : waiting) {
    std::move(queue.begin(), queue.end(), std::back_inserter(all));
  }
  waiting.clear();
  return all;
}

Tunnels::Tunnels(asio::io_context& io, TunnelOptions options)
    : io_(io), options_(options), heartbeat_timer_(io) {}

Tunnels::~Tunnels() {
  heartbeat_timer_.cancel();
}

void Tunnels::add(const std::string& name, const std::string& serial, AgentHello hello,
                  std::shared_ptr<net::TlsStream> stream) {
  auto channel = net::TlsChannel::open(std::move(stream), options_.max_response_bytes);
  {
    std::lock_guard lock(mutex_);
    auto& link = links_[name];
    if (link.open.size() >= options_.max_per_agent) {
      channel->close();
      return;
    }
    const auto now = std::chrono::system_clock::now();
    if (link.open.empty()) {
      link.connected_since = now;
    }
    link.last_seen = now;
    link.hello = std::move(hello);
    link.open.insert(channel);
    link.serials[channel.get()] = serial;
  }
  channel->on_close([this, name, weak = std::weak_ptr(channel)] {
    if (auto closing = weak.lock()) {
      closed(name, closing);
    }
  });
  release(name, std::move(channel));
}

void Tunnels::relay(const std::string& name, const std::string& client, std::string request,
                    std::chrono::milliseconds timeout, Done done) {
  std::unique_lock lock(mutex_);
  const auto found = links_.find(name);
  if (found == links_.end() || found->second.open.empty()) {
    lock.unlock();
    return done(std::nullopt, "agent " + name + " is not connected to the hub", false);
  }
  auto& link = found->second;
  if (!link.idle.empty()) {
    auto channel = std::move(link.idle.front());
    link.idle.pop_front();
    lock.unlock();
    return run(name, std::move(channel), std::move(request), timeout, std::move(done));
  }
  const auto client_queue = link.waiting.find(client);
  const auto client_waiting = client_queue == link.waiting.end() ? 0 : client_queue->second.size();
  if (link.waiting_count() >= options_.max_waiting_per_agent ||
      client_waiting >= options_.max_waiting_per_client ||
      link.waiting_bytes(client) + request.size() > options_.max_waiting_bytes_per_client) {
    lock.unlock();
    return done(std::nullopt,
                "agent " + name + " has too many requests waiting for a tunnel" +
                    (client_waiting > 0 ? " (of this client)" : ""),
                false);
  }
  const auto id = ++next_waiter_;
  auto timer = std::make_shared<asio::steady_timer>(io_, timeout);
  timer->async_wait([this, name, client, id](const asio::error_code& error) {
    if (!error) {
      expire_waiter(name, client, id);
    }
  });
  link.waiting[client].push_back(Waiter{.id = id,
                                        .client = client,
                                        .request = std::move(request),
                                        .deadline = std::chrono::steady_clock::now() + timeout,
                                        .done = std::move(done),
                                        .timer = std::move(timer)});
}

void Tunnels::run(const std::string& name, std::shared_ptr<net::TlsChannel> channel,
                  std::string request, std::chrono::milliseconds timeout, Done done) {
  // The channel keeps this callback until the exchange ends: it holds the channel weakly, or
  // a hub stopped mid-exchange would keep both forever (the open set and the pending I/O hold
  // the channel meanwhile).
  channel->exchange(std::move(request), timeout,
                    [this, name, weak = std::weak_ptr(channel), done = std::move(done)](
                        std::optional<net::ClientResponse> answer, std::string error, bool sent) {
                      if (auto carried = weak.lock(); answer && carried) {
                        {
                          std::lock_guard lock(mutex_);
                          if (const auto found = links_.find(name); found != links_.end()) {
                            found->second.last_seen = std::chrono::system_clock::now();
                          }
                        }
                        release(name, std::move(carried));
                      }
                      done(std::move(answer), std::move(error), sent);
                    });
}

void Tunnels::release(const std::string& name, std::shared_ptr<net::TlsChannel> channel) {
  std::unique_lock lock(mutex_);
  const auto found = links_.find(name);
  if (found == links_.end() || !found->second.open.contains(channel)) {
    return;  // closed meanwhile
  }
  auto& link = found->second;
  auto next = link.next_waiter();
  if (!next) {
    link.idle.push_back(std::move(channel));
    return;
  }
  auto waiter = std::move(*next);
  lock.unlock();
  waiter.timer->cancel();
  run(name, std::move(channel), std::move(waiter.request), remaining(waiter.deadline),
      std::move(waiter.done));
}

void Tunnels::closed(const std::string& name, const std::shared_ptr<net::TlsChannel>& channel) {
  std::vector<Waiter> stranded;
  {
    std::lock_guard lock(mutex_);
    const auto found = links_.find(name);
    if (found == links_.end()) {
      return;
    }
    auto& link = found->second;
    link.open.erase(channel);
    link.serials.erase(channel.get());
    std::erase(link.idle, channel);
    if (link.open.empty()) {
      link.connected_since.reset();
      // Its last tunnel gone, nothing will serve them: they fail now, not at their deadline.
      stranded = link.take_all_waiting();
    }
  }
  for (auto& waiter : stranded) {
    waiter.timer->cancel();
    waiter.done(std::nullopt, "agent " + name + " lost its last tunnel to the hub", false);
  }
}

void Tunnels::expire_waiter(const std::string& name, const std::string& client, std::uint64_t id) {
  std::unique_lock lock(mutex_);
  const auto found = links_.find(name);
  if (found == links_.end()) {
    return;
  }
  const auto queue = found->second.waiting.find(client);
  if (queue == found->second.waiting.end()) {
    return;
  }
  auto& waiting = queue->second;
  const auto waiter = std::find_if(waiting.begin(), waiting.end(),
                                   [id](const Waiter& candidate) { return candidate.id == id; });
  if (waiter == waiting.end()) {
    return;
  }
  auto done = std::move(waiter->done);
  waiting.erase(waiter);
  if (waiting.empty()) {
    found->second.waiting.erase(queue);
  }
  lock.unlock();
  done(std::nullopt, "no tunnel of agent " + name + " came free in time", false);
}

void Tunnels::drop(const std::string& name) {
  std::unique_lock lock(mutex_);
  const auto found = links_.find(name);
  if (found == links_.end()) {
    return;
  }
  auto link = std::move(found->second);
  links_.erase(found);
  lock.unlock();
  for (const auto& channel : link.open) {
    channel->close();
  }
  for (auto& waiter : link.take_all_waiting()) {
    waiter.timer->cancel();
    waiter.done(std::nullopt, "agent " + name + " was removed from the hub", false);
  }
}

void Tunnels::start_heartbeats() {
  heartbeat_timer_.expires_after(options_.heartbeat_interval);
  heartbeat_timer_.async_wait([this](const asio::error_code& error) {
    if (!error) {
      heartbeat();
      start_heartbeats();
    }
  });
}

void Tunnels::heartbeat() {
  // Every idle tunnel, however recently it carried a request: a path that died just after one
  // must be found at this tick, not at the next (a bound of one interval and the timeout).
  std::vector<std::pair<std::string, std::shared_ptr<net::TlsChannel>>> idle;
  {
    std::lock_guard lock(mutex_);
    for (auto& [name, link] : links_) {
      for (auto& channel : link.idle) {
        idle.emplace_back(name, std::move(channel));
      }
      link.idle.clear();
    }
  }
  for (auto& [name, channel] : idle) {
    run(name, std::move(channel), std::string(kHeartbeat), options_.heartbeat_timeout,
        [](std::optional<net::ClientResponse>, const std::string&, bool) {});
  }
}

AgentPresence Tunnels::describe(const std::string& name, const Link& link) const {
  return {.name = name,
          .tunnels = link.open.size(),
          .idle = link.idle.size(),
          .waiting = link.waiting_count(),
          .last_seen = link.last_seen,
          .connected_since = link.connected_since,
          .hello = link.hello};
}

std::vector<AgentPresence> Tunnels::presence() const {
  std::lock_guard lock(mutex_);
  std::vector<AgentPresence> all;
  for (const auto& [name, link] : links_) {
    all.push_back(describe(name, link));
  }
  return all;
}

std::optional<AgentPresence> Tunnels::presence(const std::string& name) const {
  std::lock_guard lock(mutex_);
  const auto found = links_.find(name);
  return found == links_.end() ? std::nullopt : std::optional(describe(name, found->second));
}

std::map<std::string, std::set<std::string>> Tunnels::serials() const {
  std::lock_guard lock(mutex_);
  std::map<std::string, std::set<std::string>> all;
  for (const auto& [name, link] : links_) {
    for (const auto& [channel, serial] : link.serials) {
      all[name].insert(serial);
    }
  }
  return all;
}

std::size_t Tunnels::tunnel_count() const {
  std::lock_guard lock(mutex_);
  std::size_t count = 0;
  for (const auto& [name, link] : links_) {
    count += link.open.size();
  }
  return count;
}

}  // namespace garm_edge::hub
