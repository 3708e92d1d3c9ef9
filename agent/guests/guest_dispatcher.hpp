#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <string>

#include <asio/thread_pool.hpp>

#include "agent/base/fair_work_queue.hpp"
#include "agent/guests/guest_service.hpp"
#include "net/http_server.hpp"

namespace garm_edge::agent {

/// Runs guest requests on three pools, so that a slow garm or a slow reader never holds up
/// another kind of request: seed fetches, relayed calls, and garm-agent downloads (which hold
/// their worker as long as the guest reads). The download workers are shared per guest: one
/// guest holds at most `downloads_per_guest` of them (its further downloads wait in its own
/// queue, holding no worker), and a download that waited `queue_deadline` gets 503 rather than
/// a late answer.
class GuestDispatcher {
 public:
  struct Options {
    std::size_t seed_workers = 4;
    std::size_t relay_workers = 8;
    std::size_t download_workers = 4;
    std::size_t downloads_per_guest = 1;
    std::chrono::milliseconds queue_deadline{std::chrono::seconds(10)};
  };

  GuestDispatcher(GuestService& guests, Options options);
  ~GuestDispatcher() { join(); }
  GuestDispatcher(const GuestDispatcher&) = delete;
  GuestDispatcher& operator=(const GuestDispatcher&) = delete;

  /// Never throws; answers through `respond` exactly once.
  void dispatch(net::HttpRequest request, std::string peer, net::HttpServer::Respond respond);
  /// Waits for every request under way (the event loop must be done).
  void join();
  /// Downloads refused because they waited too long for a worker.
  std::size_t downloads_refused() const;

 private:
  static bool is_download(const net::HttpRequest& request);
  void dispatch_download(net::HttpRequest request, std::string peer,
                         net::HttpServer::Respond respond);

  GuestService& guests_;
  Options options_;
  asio::thread_pool seeds_;
  asio::thread_pool relays_;
  FairWorkQueue downloads_;  // keyed by guest
  std::atomic<std::size_t> refused_ = 0;
};

}  // namespace garm_edge::agent
