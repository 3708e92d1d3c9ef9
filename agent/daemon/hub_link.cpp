#include "agent/daemon/hub_link.hpp"

#include <algorithm>
#include <random>

#include "common/durable_file.hpp"
#include "common/text.hpp"
#include "common/unix_time.hpp"
#include "net/tls_dial.hpp"
#include "wire/identity.hpp"
#include "wire/join_token.hpp"

namespace garm_edge::agent {
namespace {

std::string join(const std::vector<std::string>& items) {
  std::string joined;
  for (const auto& item : items) {
    joined += (joined.empty() ? "" : ",") + item;
  }
  return joined;
}

/// The backoff with ±50% jitter: a hub back from a restart is not met by every agent at once.
std::chrono::milliseconds jittered(std::chrono::milliseconds backoff) {
  thread_local std::minstd_rand random(std::random_device{}());
  std::uniform_real_distribution<double> factor(0.5, 1.5);
  return std::chrono::milliseconds(
      static_cast<std::int64_t>(static_cast<double>(backoff.count()) * factor(random)));
}

}  // namespace

net::PeerIdentity caller_through_hub(const net::HttpRequest& request) {
  const auto caller = request.header("x-garm-edge-caller").value_or("");
  net::PeerIdentity identity{.common_name = std::string(caller),
                             .uri_names = {std::string(kThroughHubIdentity)},
                             .serial = {},
                             .address = {}};
  // The hub's fleet scrape: its metrics reader reads /metrics, and nothing else.
  if (request.header("x-garm-edge-caller-role").value_or("") == "metrics") {
    identity.uri_names = {wire::role_uri(wire::Role::metrics, caller)};
    return identity;
  }
  // A hub older than this header vouches for nothing more: the agent's own config decides.
  if (const auto controllers = request.header("x-garm-edge-caller-controllers")) {
    identity.uri_names.push_back(std::string(wire::kThroughHubControllersPrefix) +
                                 std::string(*controllers));
  }
  return identity;
}

HubLink::HubLink(std::filesystem::path state_dir, net::TlsServer& tunnels,
                 net::TlsServer::Handler serve, std::string version,
                 std::vector<std::string> features, Logger& log, HubLinkOptions options)
    : state_dir_(std::move(state_dir)),
      tunnels_(tunnels),
      serve_(std::move(serve)),
      version_(std::move(version)),
      features_(std::move(features)),
      log_(log),
      options_(options),
      backoff_(options.min_backoff) {}

HubLink::~HubLink() {
  stop();
}

void HubLink::start() {
  thread_ = std::thread([this] { run(); });
}

void HubLink::stop() {
  {
    std::lock_guard lock(shared_->mutex);
    shared_->stopping = true;
  }
  shared_->changed.notify_all();
  if (thread_.joinable()) {
    thread_.join();
  }
}

HubLink::Status HubLink::status() const {
  std::lock_guard lock(shared_->mutex);
  return {.enrolled = shared_->enrolled,
          .open = shared_->open,
          .busy = shared_->busy,
          .last_error = shared_->last_error};
}

void HubLink::run() {
  while (true) {
    {
      std::lock_guard lock(shared_->mutex);
      if (shared_->stopping) {
        return;
      }
    }
    if (!refresh()) {
      wait_for(options_.check_interval);
      continue;
    }
    renew_if_due();
    fetch_crl_if_due();
    bool needed = false;
    {
      std::lock_guard lock(shared_->mutex);
      needed = shared_->open < options_.max_tunnels &&
               shared_->open - shared_->busy < options_.idle_tunnels;
    }
    if (!needed) {
      wait_for(options_.check_interval);
      continue;
    }
    if (dial_one()) {
      backoff_ = options_.min_backoff;
    } else {
      wait_for(jittered(backoff_));
      backoff_ = std::min(backoff_ * 2, options_.max_backoff);
    }
  }
}

bool HubLink::refresh() {
  try {
    // A host that joined again (another hub, or the same one after a removal) is picked up
    // without a restart.
    std::error_code missing;
    const auto joined =
        std::filesystem::last_write_time(hub_directory(state_dir_) / "hub.json", missing);
    if (enrolment_ && (missing || joined != joined_at_)) {
      enrolment_.reset();
      tls_.reset();
      sessions_.forget();
    }
    if (!enrolment_) {
      joined_at_ = joined;
      enrolment_ = load_hub_enrolment(state_dir_);
      if (!enrolment_) {
        return false;
      }
      {
        std::lock_guard lock(shared_->mutex);
        shared_->enrolled = true;
      }
      log_.info("enrolled at hub " + enrolment_->hub_url + " as " + enrolment_->name +
                ": opening tunnels");
    }
    std::error_code error;
    const auto written = std::filesystem::last_write_time(enrolment_->certificate(), error);
    if (!tls_ || (!error && written != credentials_written_)) {
      tls_ = enrolment_->client_tls();
      sessions_.forget();  // made under the old credentials
      credentials_written_ = written;
    }
    return true;
  } catch (const std::exception& e) {
    note_error(std::string("hub enrolment: ") + e.what());
    return tls_ != nullptr;  // keep using the last good credentials
  }
}

void HubLink::renew_if_due() {
  const auto now = std::chrono::steady_clock::now();
  if (now < next_renewal_check_) {
    return;
  }
  next_renewal_check_ = now + std::chrono::minutes(1);
  try {
    const auto validity = enrolment_->validity(unix_now());
    if (static_cast<double>(validity.remaining) >
        options_.renew_when_left * static_cast<double>(validity.lifetime)) {
      return;
    }
    renew_certificate(*enrolment_, options_.dial_timeout);
    log_.info("renewed the hub certificate (" + std::to_string(validity.remaining / 86400) +
              " days were left); new tunnels use it");
  } catch (const std::exception& e) {
    note_error(std::string("certificate renewal: ") + e.what());
  }
}

void HubLink::fetch_crl_if_due() {
  const auto now = std::chrono::steady_clock::now();
  if (now < next_crl_fetch_) {
    return;
  }
  next_crl_fetch_ = now + options_.crl_interval;
  try {
    const auto crl = fetch_hub_crl(*enrolment_, options_.dial_timeout);
    if (!crl || read_file(enrolment_->crl()) == *crl) {
      return;
    }
    write_atomically(enrolment_->crl(), *crl, 0644);
    tls_ = enrolment_->client_tls();  // the next tunnels check the hub against it too
    sessions_.forget();
    log_.info("the hub's CRL changed: " + enrolment_->crl().string() + " updated");
    if (options_.on_crl_change) {
      options_.on_crl_change();
    }
  } catch (const std::exception& e) {
    note_error(std::string("fetching the hub's CRL: ") + e.what());
  }
}

bool HubLink::dial_one() {
  const auto target = net::parse_https_url(enrolment_->hub_url);
  const std::string request =
      "POST /v1/tunnel HTTP/1.1\r\nHost: " + target.host + "\r\nX-Garm-Edge-Version: " + version_ +
      "\r\nX-Garm-Edge-Features: " + join(features_) + "\r\nContent-Length: 0\r\n\r\n";
  try {
    auto turned = net::dial_and_turn_around(
        target, tls_, request, std::chrono::steady_clock::now() + options_.dial_timeout,
        tunnels_.connection_executor(), &sessions_);
    if (turned.status != 200) {
      note_error("the hub refused a tunnel (HTTP " + std::to_string(turned.status) +
                 "): " + printable_excerpt(turned.body, 256));
      return false;
    }
    if (const auto refusal = hub_peer(enrolment_->directory)(turned.stream->peer)) {
      note_error("the peer at " + enrolment_->hub_url + " shows " + *refusal);
      return false;
    }
    {
      std::lock_guard lock(shared_->mutex);
      ++shared_->open;
      shared_->last_error.clear();
    }
    tunnels_.adopt(
        std::move(turned.stream),
        [serve = serve_, shared = shared_](net::HttpRequest incoming, net::PeerIdentity peer,
                                           net::TlsServer::Respond respond) {
          // The hub's heartbeats take a tunnel for a moment only: no new one is dialed for them.
          if (incoming.header("x-garm-edge-heartbeat")) {
            return serve(std::move(incoming), std::move(peer), std::move(respond));
          }
          {
            std::lock_guard lock(shared->mutex);
            ++shared->busy;
          }
          shared->bump();  // an idle tunnel was taken: dial another
          serve(std::move(incoming), std::move(peer),
                [respond = std::move(respond), shared](net::HttpResponse response) {
                  {
                    std::lock_guard lock(shared->mutex);
                    --shared->busy;
                  }
                  respond(std::move(response));
                });
        },
        [shared = shared_] {
          {
            std::lock_guard lock(shared->mutex);
            --shared->open;
          }
          shared->bump();
        });
    return true;
  } catch (const std::exception& e) {
    note_error(std::string("dialing the hub: ") + e.what());
    return false;
  }
}

void HubLink::wait_for(std::chrono::milliseconds delay) {
  std::unique_lock lock(shared_->mutex);
  const auto seen = shared_->events;
  shared_->changed.wait_for(lock, delay,
                            [this, seen] { return shared_->stopping || shared_->events != seen; });
}

void HubLink::note_error(const std::string& error) {
  {
    std::lock_guard lock(shared_->mutex);
    if (shared_->last_error == error) {
      return;  // logged once until something else happens
    }
    shared_->last_error = error;
  }
  log_.warning(error);
}

}  // namespace garm_edge::agent
