#include "agent/mirror/registry_mirror.hpp"

#include <csignal>
#include <fstream>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "common/config_error.hpp"
#include "common/durable_file.hpp"
#include "common/prometheus_text.hpp"
#include "common/subprocess.hpp"
#include "common/text.hpp"
#include "net/http_client.hpp"

namespace garm_edge::agent {
namespace {

namespace fs = std::filesystem;

constexpr std::chrono::seconds kRestartDelay{5};
constexpr std::chrono::minutes kBoundCheck{1};
constexpr std::size_t kMaxUnixSocketPath = 108;  // sockaddr_un's sun_path, its NUL included

std::string read_credentials(const fs::path& file) {
  if (file.empty()) {
    return "";
  }
  const auto text = read_file(file);
  auto line = text ? text->substr(0, text->find('\n')) : std::string();
  if (!line.empty() && line.back() == '\r') {
    line.pop_back();
  }
  if (line.find(':') == std::string::npos || !is_plain_text(line)) {
    throw ConfigError("[mirror] credentials " + file.string() +
                      ": the first line must be username:password");
  }
  return line;
}

std::uint64_t bytes_under(const fs::path& directory) {
  std::uint64_t total = 0;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(directory, ec), end; !ec && it != end;
       it.increment(ec)) {
    if (it->is_regular_file(ec)) {
      total += it->file_size(ec);
    }
  }
  return total;
}

/// A registry an earlier agent left running with this config (the agent was killed): it still
/// holds the storage and maybe the port.
void stop_stale_registries(const fs::path& config_file) {
  std::error_code ec;
  for (fs::directory_iterator it("/proc", ec), end; !ec && it != end; it.increment(ec)) {
    const auto name = it->path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) {
      continue;
    }
    std::ifstream in(it->path() / "cmdline", std::ios::binary);
    const std::string cmdline{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    if (cmdline.find(std::string("serve") + '\0' + config_file.string() + '\0') !=
        std::string::npos) {
      ::kill(static_cast<pid_t>(std::stol(name)), SIGKILL);
    }
  }
}

}  // namespace

std::string registry_mirror_config(const MirrorConfig& mirror, const fs::path& storage,
                                   const fs::path& socket, const std::string& credentials) {
  nlohmann::ordered_json proxy{{"remoteurl", mirror.upstream}};
  if (const auto colon = credentials.find(':'); colon != std::string::npos) {
    proxy["username"] = credentials.substr(0, colon);
    proxy["password"] = credentials.substr(colon + 1);
  }
  const nlohmann::ordered_json config{
      {"version", "0.1"},
      {"log", {{"level", "warn"}, {"accesslog", {{"disabled", true}}}}},
      {"storage",
       {{"filesystem", {{"rootdirectory", storage.string()}}},
        {"delete", {{"enabled", true}}},
        {"cache", {{"blobdescriptor", "inmemory"}}}}},
      {"http",
       {{"net", "unix"},
        {"addr", socket.string()},
        {"headers", {{"X-Content-Type-Options", {"nosniff"}}}}}},
      {"proxy", proxy}};
  return config.dump(2) + "\n";
}

RegistryMirror::RegistryMirror(const AgentConfig& config, Logger& log)
    : config_(config.mirror),
      directory_(config.mirror_directory()),
      storage_(directory_ / "registry"),
      config_file_(directory_ / "registry.json"),
      socket_(directory_ / "registry.sock"),
      log_(log) {
  // A unix socket in the agent's private directory: no other account of the host can pull
  // with the operator's credentials or read what tenants pulled.
  if (socket_.string().size() >= kMaxUnixSocketPath) {
    throw ConfigError("[mirror] directory " + directory_.string() +
                      " is too long for the registry's socket (" + socket_.string() + ")");
  }
  if (config_.port != 0) {
    log_.warning("[mirror] port is no longer used: the registry listens on " + socket_.string());
  }
  try {
    make_private_directory(directory_);
    write_atomically(config_file_, registry_mirror_config(config_, storage_, socket_,
                                                          read_credentials(config_.credentials)));
  } catch (const DurableFileError& e) {
    throw ConfigError(std::string("[mirror]: ") + e.what());
  }
}

RegistryMirror::~RegistryMirror() {
  stop();
}

fs::path RegistryMirror::socket() const {
  return socket_;
}

fs::path RegistryMirror::blob_root() const {
  return storage_ / "docker" / "registry" / "v2" / "blobs";
}

bool RegistryMirror::answers() const {
  try {
    const auto answer =
        net::send_request(net::unix_socket_url(socket_),
                          {.method = "GET", .target = "/v2/", .headers = {}, .body = ""},
                          {.connect_timeout = std::chrono::seconds(1),
                           .request_timeout = std::chrono::seconds(5),
                           .max_response_bytes = 64 * 1024,
                           .proxy = std::nullopt,
                           .stop = nullptr},
                          nullptr);
    return answer.status == 200 || answer.status == 401;
  } catch (const net::HttpClientError&) {
    return false;
  }
}

void RegistryMirror::start(std::chrono::milliseconds ready_within) {
  stop_stale_registries(config_file_);
  stopping_ = false;
  thread_ = std::thread([this] { run(); });
  const auto deadline = std::chrono::steady_clock::now() + ready_within;
  while (!answers()) {
    if (std::chrono::steady_clock::now() >= deadline) {
      throw std::runtime_error("the registry mirror (" + config_.registry.string() +
                               ") did not answer on " + socket_.string() + " within " +
                               std::to_string(ready_within.count() / 1000) +
                               " s: see the agent's log");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  up_ = true;
  log_.info("registry mirror of " + config_.upstream + " on " + socket_.string() + ", storage " +
            storage_.string());
}

void RegistryMirror::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    restart_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) {
    thread_.join();
  }
  up_ = false;
}

void RegistryMirror::run() {
  auto next_bound_check = std::chrono::steady_clock::now() + kBoundCheck;
  while (!stopping_) {
    restart_ = false;
    // Beside the registry: its health every 5 s, its storage every minute.
    std::thread watch([this, &next_bound_check] {
      std::unique_lock lock(mutex_);
      while (!restart_) {
        wake_.wait_for(lock, std::chrono::seconds(5));
        if (restart_) {
          break;
        }
        lock.unlock();
        up_ = answers();
        if (std::chrono::steady_clock::now() >= next_bound_check) {
          enforce_bound();
          next_bound_check = std::chrono::steady_clock::now() + kBoundCheck;
        }
        lock.lock();
      }
    });
    ProcessResult result;
    try {
      result = run_process({config_.registry.string(), "serve", config_file_.string()},
                           {.timeout = std::chrono::hours(24 * 365 * 10),
                            .stop = &restart_,
                            .stdout_fd = -1,
                            .max_output = 4096});
    } catch (const std::exception& e) {
      result.output = e.what();
    }
    {
      std::lock_guard lock(mutex_);
      restart_ = true;
    }
    wake_.notify_all();
    watch.join();
    up_ = false;
    if (stopping_) {
      break;
    }
    if (flush_requested_.exchange(false)) {  // the registry is gone: its files can go
      std::error_code ec;
      fs::remove_all(storage_, ec);
      stored_bytes_ = 0;
      ++flushes_;
    } else {  // it died: say why, and start it again a moment later
      ++restarts_;
      log_.error("the registry mirror ended (exit " + std::to_string(result.exit_code) +
                 "): " + printable_excerpt(result.output, 400) + "; starting it again in 5 s");
      std::unique_lock lock(mutex_);
      wake_.wait_for(lock, kRestartDelay, [this] { return stopping_.load(); });
    }
  }
}

void RegistryMirror::enforce_bound() {
  const auto bytes = bytes_under(storage_);
  stored_bytes_ = bytes;
  if (bytes <= config_.max_bytes) {
    return;
  }
  log_.warning("the registry mirror holds " + std::to_string(bytes >> 20U) +
               " MiB, past [mirror] max_gib: emptying it (it refills from " + config_.upstream +
               ")");
  {
    std::lock_guard lock(mutex_);
    flush_requested_ = true;
    restart_ = true;  // run_process ends the registry within 100 ms; run() empties and restarts
  }
  wake_.notify_all();
}

std::string RegistryMirror::render_metrics() const {
  PrometheusText text;
  text.family("garm_edge_mirror_up", "gauge", "1 when the registry mirror answers.");
  text.sample("garm_edge_mirror_up", {}, std::uint64_t{up_.load() ? 1U : 0U});
  text.family("garm_edge_mirror_stored_bytes", "gauge",
              "What the registry mirror holds on disk, as last counted.");
  text.sample("garm_edge_mirror_stored_bytes", {}, stored_bytes_.load());
  text.family("garm_edge_mirror_restarts_total", "counter",
              "Times the registry mirror ended by itself and was started again.");
  text.sample("garm_edge_mirror_restarts_total", {}, restarts_.load());
  text.family("garm_edge_mirror_flushes_total", "counter",
              "Times the registry mirror was emptied for passing max_gib.");
  text.sample("garm_edge_mirror_flushes_total", {}, flushes_.load());
  return text.str();
}

}  // namespace garm_edge::agent
