#pragma once

#include <chrono>
#include <cstddef>
#include <string>

#include "agent/base/fair_work_queue.hpp"
#include "agent/guests/guest_index.hpp"
#include "agent/guests/guest_service.hpp"
#include "net/http_server.hpp"

namespace garm_edge::agent {

/// Runs guest requests on three pools, so that a slow garm or a slow reader never holds up
/// another kind of request: seed fetches, relayed calls, and garm-agent downloads (which hold
/// their worker as long as the guest reads). Each pool is shared per guest and per controller
/// (the guest's instance's): one guest holds at most its per-guest share of a pool, one
/// controller's guests at most half of it, and further requests wait in their guest's own
/// queue holding no worker. A request that waited `queue_deadline` gets 503 at that moment
/// rather than a late answer.
class GuestDispatcher {
 public:
  struct Options {
    std::size_t seed_workers = 4;
    std::size_t relay_workers = 8;
    std::size_t download_workers = 4;
    std::size_t seeds_per_guest = 1;
    std::size_t relays_per_guest = 2;
    std::size_t downloads_per_guest = 1;
    std::chrono::milliseconds queue_deadline{std::chrono::seconds(10)};
  };

  GuestDispatcher(GuestService& guests, const GuestIndex& index, Options options);
  ~GuestDispatcher() { join(); }
  GuestDispatcher(const GuestDispatcher&) = delete;
  GuestDispatcher& operator=(const GuestDispatcher&) = delete;

  /// Never throws; answers through `respond` exactly once.
  void dispatch(net::HttpRequest request, std::string peer, net::HttpServer::Respond respond);
  /// Waits for every request under way (the event loop must be done).
  void join();
  /// Requests refused because they waited too long for a worker.
  std::size_t refused() const;

 private:
  FairWorkQueue& pool_for(const net::HttpRequest& request);

  GuestService& guests_;
  const GuestIndex& index_;
  FairWorkQueue seeds_;
  FairWorkQueue relays_;
  FairWorkQueue downloads_;
};

}  // namespace garm_edge::agent
