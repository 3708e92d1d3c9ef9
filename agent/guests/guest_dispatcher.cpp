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
      downloads_(options.download_workers, options.downloads_per_guest) {}

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
  const auto queued = std::chrono::steady_clock::now();
  downloads_.post(peer, [this, queued, request = std::move(request), peer,
                         respond = std::move(respond)]() mutable {
    if (std::chrono::steady_clock::now() - queued > options_.queue_deadline) {
      ++refused_;
      return respond(refusal(503, "every download worker was busy; try again"));
    }
    guests_.handle_async(request, peer, std::move(respond));  // never throws
  });
}

std::size_t GuestDispatcher::downloads_refused() const {
  return refused_.load();
}

void GuestDispatcher::join() {
  relays_.join();
  downloads_.join();
  seeds_.join();
}

}  // namespace garm_edge::agent
