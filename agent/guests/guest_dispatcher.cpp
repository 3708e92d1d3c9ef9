#include "agent/guests/guest_dispatcher.hpp"

#include <asio/post.hpp>

namespace garm_edge::agent {
namespace {

net::HttpResponse refusal(int status, const std::string& why) {
  return {.status = status,
          .content_type = "text/plain; charset=utf-8",
          .body = why + "\n",
          .headers = {{"Retry-After", "5"}}};
}

}  // namespace

GuestDispatcher::GuestDispatcher(GuestService& guests, Options options)
    : guests_(guests),
      options_(options),
      seeds_(options.seed_workers),
      relays_(options.relay_workers),
      downloads_(options.download_workers) {}

bool GuestDispatcher::is_download(const net::HttpRequest& request) {
  return (request.path.starts_with("/api/") || request.path.starts_with("/agent")) &&
         (request.path.ends_with("/download") || request.path.ends_with("/download/"));
}

void GuestDispatcher::dispatch(net::HttpRequest request, std::string peer,
                               net::HttpServer::Respond respond) {
  if (is_download(request)) {
    return dispatch_download(std::move(request), std::move(peer), std::move(respond));
  }
  const bool to_garm = request.path.starts_with("/api/") || request.path.starts_with("/agent");
  asio::post(to_garm ? relays_ : seeds_,
             [this, request = std::move(request), peer = std::move(peer),
              respond = std::move(respond)]() mutable {
               guests_.handle_async(request, peer, std::move(respond));  // never throws
             });
}

void GuestDispatcher::dispatch_download(net::HttpRequest request, std::string peer,
                                        net::HttpServer::Respond respond) {
  if (!take_download_share(peer)) {
    return respond(refusal(429, "this guest already has its share of downloads under way"));
  }
  const auto queued = std::chrono::steady_clock::now();
  asio::post(downloads_, [this, queued, request = std::move(request), peer = std::move(peer),
                          respond = std::move(respond)]() mutable {
    if (std::chrono::steady_clock::now() - queued > options_.queue_deadline) {
      respond(refusal(503, "every download worker was busy; try again"));
      {
        std::lock_guard lock(mutex_);
        ++refused_;
      }
    } else {
      guests_.handle_async(request, peer, std::move(respond));  // never throws
    }
    give_back_download_share(peer);
  });
}

bool GuestDispatcher::take_download_share(const std::string& peer) {
  std::lock_guard lock(mutex_);
  auto& held = downloads_by_guest_[peer];
  if (held >= options_.downloads_per_guest) {
    ++refused_;
    return false;
  }
  ++held;
  return true;
}

void GuestDispatcher::give_back_download_share(const std::string& peer) {
  std::lock_guard lock(mutex_);
  if (const auto held = downloads_by_guest_.find(peer);
      held != downloads_by_guest_.end() && --held->second == 0) {
    downloads_by_guest_.erase(held);
  }
}

std::size_t GuestDispatcher::downloads_refused() const {
  std::lock_guard lock(mutex_);
  return refused_;
}

void GuestDispatcher::join() {
  relays_.join();
  downloads_.join();
  seeds_.join();
}

}  // namespace garm_edge::agent
