// The hub's watcher of its records: what the listeners read without waiting on the state, and
// what it keeps while the state cannot be read (PostgreSQL restarting).

#include "hub/state_watcher.hpp"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>

#include <catch2/catch.hpp>

#include "common/temp_dir.hpp"
#include "hub/hub_state.hpp"
#include "net/pki.hpp"

using namespace garm_edge;

namespace {

const hub::UnixSeconds kWatchNow = std::chrono::duration_cast<std::chrono::seconds>(
                                       std::chrono::system_clock::now().time_since_epoch())
                                       .count();

/// The file state, made to fail every call while `failing` is set (a database going away).
class FailingState final : public hub::HubState {
 public:
  FailingState(std::unique_ptr<hub::HubState> inner, const std::atomic<bool>& failing)
      : inner_(std::move(inner)), failing_(failing) {}
  std::vector<hub::TokenRecord> tokens() override { return check().tokens(); }
  std::optional<hub::TokenRecord> token(const std::string& id) override {
    return check().token(id);
  }
  std::vector<hub::AgentRecord> agents() override { return check().agents(); }
  std::optional<hub::AgentRecord> agent(const std::string& name) override {
    return check().agent(name);
  }
  hub::RevocationList revocations() override { return check().revocations(); }
  std::vector<hub::ClientRecord> clients() override { return check().clients(); }
  void change(const std::function<void(hub::StateChange&)>& change) override {
    check().change(change);
  }
  std::uint64_t agents_generation() override { return check().agents_generation(); }
  // The registry as PostgreSQL keeps it (files keep none).
  void announce_hub(const std::string& url, std::int64_t now) override {
    check();
    std::lock_guard lock(hubs_mutex_);
    std::erase_if(hubs_, [&](const auto& hub) { return hub.url == url; });
    hubs_.push_back({.url = url, .announced_at = now});
  }
  std::vector<hub::HubAnnouncement> hubs() override {
    check();
    std::lock_guard lock(hubs_mutex_);
    return hubs_;
  }
  std::string describe() const override { return inner_->describe(); }

 private:
  hub::HubState& check() {
    if (failing_) {
      throw std::runtime_error("the database is restarting");
    }
    return *inner_;
  }
  std::unique_ptr<hub::HubState> inner_;
  const std::atomic<bool>& failing_;
  std::mutex hubs_mutex_;
  std::vector<hub::HubAnnouncement> hubs_;
};

class RecordingLog final : public Logger {
 public:
  void log(Level, std::string_view message) override {
    std::lock_guard lock(mutex_);
    text_ += std::string(message) + "\n";
  }
  std::string text() {
    std::lock_guard lock(mutex_);
    return text_;
  }

 private:
  std::mutex mutex_;
  std::string text_;
};

bool eventually(const std::function<bool()>& condition) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!condition()) {
    if (std::chrono::steady_clock::now() > deadline) {
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

std::filesystem::path initialised_hub(const TempDir& dir) {
  hub::HubStore::init(dir.path(), {.dns_names = {"hub.lab"}, .ip_addresses = {}});
  return dir.path();
}

/// A hub's state directory and a second store on it: the CLI, or another hub, changing it.
struct WatchedHub {
  hub::Enrolled enrol(const std::string& name) {
    const auto [token, secret] = other.create_token(std::chrono::hours(1), 1, {}, {}, kWatchNow);
    return other.enrol({.token_id = token.id,
                        .secret = secret,
                        .name = name,
                        .request_pem = net::pki_make_request(name).request_pem,
                        .dns_names = {},
                        .ip_addresses = {}},
                       kWatchNow);
  }
  TempDir dir{"hub-watch"};
  std::filesystem::path state = initialised_hub(dir);
  hub::HubStore other{state};
  std::atomic<bool> failing{false};
  hub::HubStore store{
      state, {}, std::make_unique<FailingState>(hub::open_file_state(state), failing)};
  RecordingLog log;
  std::atomic<int> reads{0};
};

}  // namespace

TEST_CASE("the watcher follows the records, and keeps the last read while they cannot be read",
          "[hub][state]") {
  WatchedHub hub;
  const auto first = hub.enrol("rack1-a");
  hub::StateWatcher watcher(hub.store, hub.log,
                            {.tick = std::chrono::milliseconds(20), .full_check_ticks = 5},
                            "https://hub-a.lab:8444", [&] { ++hub.reads; });
  watcher.start();
  CHECK(watcher.known("rack1-a"));
  CHECK(watcher.agents().size() == 1);

  // Removed by another process: gone from what the listeners read, and `changed` ran.
  const auto reads = hub.reads.load();
  CHECK(hub.other.remove("rack1-a", kWatchNow));
  CHECK(eventually([&] { return !watcher.known("rack1-a") && hub.reads > reads; }));

  // The state unreadable: the agents read last stay, said once in the log.
  const auto second = hub.enrol("rack1-b");
  CHECK(eventually([&] { return watcher.known("rack1-b").has_value(); }));
  hub.failing = true;
  hub.enrol("rack1-c");
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // three full checks
  CHECK(watcher.known("rack1-b"));
  CHECK_FALSE(watcher.known("rack1-c"));
  const auto serial = second.agent.certificates.front().serial;
  CHECK(watcher.accepting("rack1-b", serial, kWatchNow));  // from the last read
  CHECK_THROWS(watcher.accepting("rack1-c", "00", kWatchNow));
  const auto log = hub.log.text();
  CHECK_THAT(log, Catch::Contains("cannot be read, serving the agents read last"));
  CHECK(log.find("cannot be read") == log.rfind("cannot be read"));

  hub.failing = false;
  CHECK(eventually([&] { return watcher.known("rack1-c").has_value(); }));
  CHECK_THAT(hub.log.text(), Catch::Contains("can be read again"));
  CHECK_FALSE(watcher.accepting("rack1-a", first.agent.certificates.front().serial, kWatchNow));
  watcher.stop();
}

TEST_CASE(
    "an agent enrolled a moment ago, at this hub or another, is accepted before the next read",
    "[hub][state]") {
  WatchedHub hub;
  hub::StateWatcher watcher(hub.store, hub.log,
                            {.tick = std::chrono::hours(1), .full_check_ticks = 1},
                            "https://hub-a.lab:8444", [] {});
  watcher.start();
  const auto enrolled = hub.enrol("rack1-a");  // at "another hub": this watcher did not read it
  CHECK_FALSE(watcher.known("rack1-a"));
  const auto serial = enrolled.agent.certificates.front().serial;
  const auto accepted = watcher.accepting("rack1-a", serial, kWatchNow);
  REQUIRE(accepted);
  CHECK(accepted->name == "rack1-a");
  CHECK(watcher.known("rack1-a"));  // noted
  CHECK_FALSE(watcher.accepting("rack1-a", "0badc0de", kWatchNow));
  CHECK_FALSE(watcher.accepting("rack1-z", serial, kWatchNow));

  // A renewal: the new certificate is accepted though the last read had the old one only.
  auto renewed = *accepted;
  renewed.certificates.push_back(
      {.serial = "5eed", .not_before = kWatchNow, .not_after = kWatchNow + 60});
  watcher.note(renewed);
  CHECK(watcher.accepting("rack1-a", "5eed", kWatchNow));
  watcher.stop();
}

TEST_CASE("a change this hub made for the CLI is read at once, not at the next tick",
          "[hub][state]") {
  WatchedHub hub;
  hub.enrol("rack1-a");
  hub::StateWatcher watcher(hub.store, hub.log,
                            {.tick = std::chrono::hours(1), .full_check_ticks = 1},
                            "https://hub-a.lab:8444", [&] { ++hub.reads; });
  watcher.start();
  REQUIRE(watcher.known("rack1-a"));
  CHECK(hub.other.remove("rack1-a", kWatchNow));
  watcher.check_now();
  CHECK(eventually([&] { return !watcher.known("rack1-a") && hub.reads == 1; }));
  watcher.stop();
}

TEST_CASE("each hub announces itself and gives agents every hub that announced itself lately",
          "[hub][state]") {
  WatchedHub hub;
  auto& registry = hub.store.state();
  registry.announce_hub("https://hub-b.lab:8444", kWatchNow);
  registry.announce_hub("https://hub-old.lab:8444", kWatchNow - 3600);  // silent for an hour
  hub::StateWatcher watcher(hub.store, hub.log,
                            {.tick = std::chrono::milliseconds(20),
                             .full_check_ticks = 2,
                             .announce_interval = std::chrono::seconds(30),
                             .hub_silent_after = std::chrono::minutes(10)},
                            "https://hub-a.lab:8444", [] {});
  watcher.start();
  // This hub first, then the others by URL; the silent one is not given.
  CHECK(watcher.hub_urls() ==
        std::vector<std::string>{"https://hub-a.lab:8444", "https://hub-b.lab:8444"});
  const auto announced = registry.hubs();
  CHECK(std::any_of(announced.begin(), announced.end(), [](const auto& entry) {
    return entry.url == "https://hub-a.lab:8444" && entry.announced_at >= kWatchNow;
  }));

  // A hub started later is given at the next full check; the state failing keeps the last.
  registry.announce_hub("https://hub-c.lab:8444", kWatchNow);
  CHECK(eventually([&] { return watcher.hub_urls().size() == 3; }));
  hub.failing = true;
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  CHECK(watcher.hub_urls().size() == 3);
  hub.failing = false;
  watcher.stop();
}
