#include "agent/guests/guest_dispatcher.hpp"

#include <memory>

namespace garm_edge::agent {
namespace {

net::HttpResponse busy() {
  return {.status = 503,
          .content_type = "text/plain; charset=utf-8",
          .body = "every worker for this request was busy; try again\n",
          .headers = {{"Retry-After", "5"}}};
}

FairWorkQueue::Limits per_guest(std::size_t share, std::chrono::milliseconds deadline) {
  return {.per_key = share, .per_group = 0, .queue_deadline = deadline};
}

bool is_download(const net::HttpRequest& request) {
  if (request.path.starts_with("/v2/")) {
    return true;  // a registry mirror pull: layers are hundreds of MB
  }
  return (request.path.starts_with("/api/") || request.path.starts_with("/agent")) &&
         (request.path.ends_with("/download") || request.path.ends_with("/download/"));
}

}  // namespace

GuestDispatcher::GuestDispatcher(GuestService& guests, const GuestIndex& index, Options options)
    : guests_(guests),
      index_(index),
      seeds_(options.seed_workers, per_guest(options.seeds_per_guest, options.queue_deadline)),
      relays_(options.relay_workers, per_guest(options.relays_per_guest, options.queue_deadline)),
      downloads_(options.download_workers,
                 per_guest(options.downloads_per_guest, options.queue_deadline)) {}

FairWorkQueue& GuestDispatcher::pool_for(const net::HttpRequest& request) {
  if (is_download(request)) {
    return downloads_;
  }
  const bool to_garm = request.path.starts_with("/api/") || request.path.starts_with("/agent");
  return to_garm ? relays_ : seeds_;
}

void GuestDispatcher::dispatch(net::HttpRequest request, std::string peer,
                               net::HttpServer::Respond respond) {
  // Both the job and its expiry answer through `respond`; exactly one of them ever runs.
  auto shared_respond = std::make_shared<net::HttpServer::Respond>(std::move(respond));
  auto& pool = pool_for(request);
  FairWorkQueue::Owner owner{.key = peer, .group = index_.controller_at(peer)};
  pool.post(
      std::move(owner),
      [this, request = std::move(request), peer, shared_respond] {
        guests_.handle_async(request, peer, std::move(*shared_respond));  // never throws
      },
      [shared_respond] { (*shared_respond)(busy()); });
}

std::size_t GuestDispatcher::refused() const {
  return seeds_.expired() + relays_.expired() + downloads_.expired();
}

void GuestDispatcher::join() {
  relays_.join();
  downloads_.join();
  seeds_.join();
}

}  // namespace garm_edge::agent
