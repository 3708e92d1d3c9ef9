#include "agent/daemon/hub_link.hpp"

#include <algorithm>
#include <random>
#include <utility>

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
      options_(std::move(options)) {}

HubLink::~HubLink() {
  stop();
}

void HubLink::start() {
  thread_ = std::thread([this] { run(); });
}

void HubLink::stop() {
  signal_.stop();
  if (thread_.joinable()) {
    thread_.join();
  }
  stop_dialers();
}

HubLink::Status HubLink::status() const {
  Status status{.enrolled = enrolled_.load(),
                .open = 0,
                .busy = 0,
                .hubs_known = 0,
                .hubs_connected = 0,
                .last_error = {}};
  {
    std::lock_guard lock(latest_error_mutex_);
    status.last_error = latest_error_;
  }
  std::lock_guard lock(dialers_mutex_);
  status.hubs_known = dialers_.size();
  for (const auto& [url, dialer] : dialers_) {
    std::lock_guard hub_lock(dialer.tunnels->signal.mutex);
    status.open += dialer.tunnels->open;
    status.busy += dialer.tunnels->busy;
    status.hubs_connected += dialer.tunnels->open > 0 ? 1U : 0U;
  }
  return status;
}

void HubLink::run() {
  while (true) {
    {
      std::lock_guard lock(signal_.mutex);
      if (signal_.stopping) {
        return;
      }
    }
    if (refresh()) {
      renew_if_due();
      follow_fleet_if_due();
      try {
        update_dialers();
      } catch (const std::exception& e) {  // hubs.json unreadable, no thread to be had
        note_error(signal_, std::string("keeping tunnels to the fleet's hubs: ") + e.what());
      }
    } else {
      stop_dialers();
    }
    wait_for(signal_, options_.check_interval);
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
      set_credentials(nullptr);
      stop_dialers();  // the next ones dial with the new enrolment, to its hubs
    }
    if (!enrolment_) {
      joined_at_ = joined;
      enrolment_ = load_hub_enrolment(state_dir_);
      if (!enrolment_) {
        enrolled_ = false;
        return false;
      }
      enrolled_ = true;
      log_.info("enrolled at hub " + enrolment_->hub_url + " as " + enrolment_->name +
                ": opening tunnels");
    }
    std::error_code error;
    const auto written = std::filesystem::last_write_time(enrolment_->certificate(), error);
    if (!credentials().first || (!error && written != credentials_written_)) {
      set_credentials(enrolment_->client_tls());
      credentials_written_ = written;
    }
    return true;
  } catch (const std::exception& e) {
    note_error(signal_, std::string("hub enrolment: ") + e.what());
    return enrolment_.has_value() && credentials().first != nullptr;  // the last good ones
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
    renew_certificate(*enrolment_, options_.dial_timeout, hubs_with_tunnels());
    clear_error(signal_);
    log_.info("renewed the hub certificate (" + std::to_string(validity.remaining / 86400) +
              " days were left); new tunnels use it");
  } catch (const std::exception& e) {
    note_error(signal_, std::string("certificate renewal: ") + e.what());
  }
}

void HubLink::follow_fleet_if_due() {
  const auto now = std::chrono::steady_clock::now();
  if (now < next_fleet_check_) {
    return;
  }
  next_fleet_check_ = now + options_.crl_interval;
  fetch_crl();
  fetch_hubs();
}

void HubLink::fetch_crl() {
  try {
    const auto crl = fetch_hub_crl(*enrolment_, options_.dial_timeout, hubs_with_tunnels());
    clear_error(signal_);
    if (!crl || read_file(enrolment_->crl()) == *crl) {
      return;
    }
    write_atomically(enrolment_->crl(), *crl, 0644);
    set_credentials(enrolment_->client_tls());  // the next tunnels check the hub against it too
    log_.info("the hub's CRL changed: " + enrolment_->crl().string() + " updated");
    if (options_.on_crl_change) {
      options_.on_crl_change();
    }
  } catch (const std::exception& e) {
    note_error(signal_, std::string("fetching the hub's CRL: ") + e.what());
  }
}

void HubLink::fetch_hubs() {
  try {
    const auto hubs = fetch_hub_urls(*enrolment_, options_.dial_timeout, hubs_with_tunnels());
    const auto kept = read_file(enrolment_->hubs_file());
    if (!hubs || (kept && parse_hub_urls(*kept) == hubs)) {
      return;
    }
    const auto before = enrolment_->hub_urls();
    save_hub_urls(*enrolment_, *hubs);
    dialers_current_ = false;
    if (const auto after = enrolment_->hub_urls(); after != before) {
      log_.info("the fleet's hubs are now " + join(after) + ": keeping tunnels to each");
    }
  } catch (const std::exception& e) {
    note_error(signal_, std::string("asking for the fleet's hubs: ") + e.what());
  }
}

std::vector<std::string> HubLink::hubs_with_tunnels() const {
  std::vector<std::string> reached;
  std::lock_guard lock(dialers_mutex_);
  for (const auto& [url, dialer] : dialers_) {
    std::lock_guard open_lock(dialer.tunnels->signal.mutex);
    if (dialer.tunnels->open > 0) {
      reached.push_back(url);
    }
  }
  return reached;
}

void HubLink::update_dialers() {
  if (dialers_current_) {
    return;  // hubs.json is read again only after a new enrolment or a new list
  }
  const auto urls = enrolment_->hub_urls();
  std::vector<Dialer> gone;
  {
    std::lock_guard lock(dialers_mutex_);
    for (auto dialer = dialers_.begin(); dialer != dialers_.end();) {
      if (std::find(urls.begin(), urls.end(), dialer->first) == urls.end()) {
        gone.push_back(std::move(dialer->second));
        dialer = dialers_.erase(dialer);
      } else {
        ++dialer;
      }
    }
    for (const auto& url : urls) {
      if (dialers_.contains(url)) {
        continue;
      }
      auto tunnels = std::make_shared<HubTunnels>();
      tunnels->url = url;
      dialers_[url] = Dialer{.tunnels = tunnels,
                             .thread = std::thread([this, tunnels] { dial_loop(tunnels); })};
    }
  }
  for (auto& dialer : gone) {
    dialer.tunnels->signal.stop();
    dialer.thread.join();
  }
  dialers_current_ = true;
}

void HubLink::stop_dialers() {
  dialers_current_ = false;
  std::map<std::string, Dialer> stopping;
  {
    std::lock_guard lock(dialers_mutex_);
    stopping.swap(dialers_);
  }
  for (auto& [url, dialer] : stopping) {
    dialer.tunnels->signal.stop();  // all at once: none waits for another's dial to end
  }
  for (auto& [url, dialer] : stopping) {
    dialer.thread.join();
  }
}

void HubLink::dial_loop(const std::shared_ptr<HubTunnels>& shared) {
  auto& hub = *shared;
  net::SessionMemory sessions;  // the session the last tunnel's handshake made, resumed next
  std::uint64_t credentials_seen = 0;
  auto backoff = options_.min_backoff;
  while (true) {
    bool needed = false;
    {
      std::lock_guard lock(hub.signal.mutex);
      if (hub.signal.stopping) {
        return;
      }
      needed = hub.open < options_.max_tunnels && hub.open - hub.busy < options_.idle_tunnels;
    }
    const auto [tls, changes] = credentials();
    if (changes != credentials_seen) {
      sessions.forget();  // made under the old credentials
      credentials_seen = changes;
    }
    if (!needed || !tls) {
      wait_for(hub.signal, options_.check_interval);
    } else if (dial_one(shared, tls, sessions)) {
      backoff = options_.min_backoff;
    } else {
      wait_for(hub.signal, jittered(backoff));
      backoff = std::min(backoff * 2, options_.max_backoff);
    }
  }
}

std::pair<std::shared_ptr<const net::TlsConfig>, std::uint64_t> HubLink::credentials() const {
  std::lock_guard lock(credentials_mutex_);
  return {tls_, credentials_changes_};
}

void HubLink::set_credentials(std::shared_ptr<const net::TlsConfig> tls) {
  std::lock_guard lock(credentials_mutex_);
  tls_ = std::move(tls);
  ++credentials_changes_;
}

bool HubLink::dial_one(const std::shared_ptr<HubTunnels>& shared,
                       const std::shared_ptr<const net::TlsConfig>& tls,
                       net::SessionMemory& sessions) {
  auto& hub = *shared;
  try {
    const auto target = net::parse_https_url(hub.url);
    const std::string request = "POST /v1/tunnel HTTP/1.1\r\nHost: " + target.host +
                                "\r\nX-Garm-Edge-Version: " + version_ +
                                "\r\nX-Garm-Edge-Features: " + join(features_) +
                                "\r\nContent-Length: 0\r\n\r\n";
    auto turned = net::dial_and_turn_around(
        target, tls, request, std::chrono::steady_clock::now() + options_.dial_timeout,
        tunnels_.connection_executor(), &sessions);
    if (turned.status != 200) {
      note_error(hub.signal,
                 "the hub at " + hub.url + " refused a tunnel (HTTP " +
                     std::to_string(turned.status) + "): " + printable_excerpt(turned.body, 256),
                 hub.url);
      return false;
    }
    if (const auto refusal = hub_peer(hub_directory(state_dir_))(turned.stream->peer)) {
      note_error(hub.signal, "the peer at " + hub.url + " shows " + *refusal, hub.url);
      return false;
    }
    {
      std::lock_guard lock(hub.signal.mutex);
      ++hub.open;
      hub.signal.last_error.clear();
    }
    {
      std::lock_guard lock(latest_error_mutex_);
      if (latest_error_source_ == hub.url) {
        latest_error_.clear();  // this hub's error is over
      }
    }
    adopt_tunnel(std::move(turned.stream), shared);
    return true;
  } catch (const std::exception& e) {
    note_error(hub.signal, "dialing the hub at " + hub.url + ": " + e.what(), hub.url);
    return false;
  }
}

void HubLink::adopt_tunnel(std::shared_ptr<net::TlsStream> stream,
                           std::shared_ptr<HubTunnels> shared) {
  // The callbacks hold the hub's tunnels: they may run after its dialer stopped.
  tunnels_.adopt(
      std::move(stream),
      [serve = serve_, shared](net::HttpRequest incoming, net::PeerIdentity peer,
                               net::TlsServer::Respond respond) {
        // The hub's heartbeats take a tunnel for a moment only: no new one is dialed for them.
        if (incoming.header("x-garm-edge-heartbeat")) {
          return serve(std::move(incoming), std::move(peer), std::move(respond));
        }
        {
          std::lock_guard lock(shared->signal.mutex);
          ++shared->busy;
        }
        shared->signal.bump();  // an idle tunnel was taken: dial another
        serve(std::move(incoming), std::move(peer),
              [respond = std::move(respond), shared](net::HttpResponse response) {
                {
                  std::lock_guard lock(shared->signal.mutex);
                  --shared->busy;
                }
                respond(std::move(response));
              });
      },
      [shared] {
        {
          std::lock_guard lock(shared->signal.mutex);
          --shared->open;
        }
        shared->signal.bump();
      });
}

void HubLink::wait_for(Signal& signal, std::chrono::milliseconds delay) {
  std::unique_lock lock(signal.mutex);
  const auto seen = signal.events;
  signal.changed.wait_for(lock, delay,
                          [&signal, seen] { return signal.stopping || signal.events != seen; });
}

void HubLink::clear_error(Signal& signal) {
  std::string cleared;
  {
    std::lock_guard lock(signal.mutex);
    cleared = std::exchange(signal.last_error, {});
  }
  std::lock_guard lock(latest_error_mutex_);
  if (!cleared.empty() && latest_error_ == cleared) {
    latest_error_.clear();
  }
}

void HubLink::note_error(Signal& signal, const std::string& error, const std::string& source) {
  {
    std::lock_guard lock(signal.mutex);
    if (signal.last_error == error) {
      return;  // logged once until something else happens
    }
    signal.last_error = error;
  }
  {
    std::lock_guard lock(latest_error_mutex_);
    latest_error_ = error;
    latest_error_source_ = source;
  }
  log_.warning(error);
}

}  // namespace garm_edge::agent
