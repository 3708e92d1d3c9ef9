#include "agent/daemon/images_command.hpp"

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <functional>
#include <grp.h>
#include <iomanip>
#include <ostream>
#include <pthread.h>
#include <pwd.h>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

#include "agent/base/config.hpp"
#include "agent/base/log.hpp"
#include "agent/images/pulled_images.hpp"
#include "agent/instances/instance_store.hpp"

namespace garm_edge::agent {
namespace fs = std::filesystem;
namespace {

/// Root working on the state of an agent that runs as its own account works as that account.
void become_state_owner(const fs::path& state_dir) {
  struct stat owner {};
  if (::geteuid() != 0 || ::stat(state_dir.c_str(), &owner) != 0 || owner.st_uid == 0) {
    return;
  }
  // Its groups too: libvirt's socket is the libvirt group's.
  const auto* account = ::getpwuid(owner.st_uid);
  if (account == nullptr || ::initgroups(account->pw_name, owner.st_gid) != 0 ||
      ::setgid(owner.st_gid) != 0 || ::setuid(owner.st_uid) != 0) {
    throw std::runtime_error("cannot work as the owner of " + state_dir.string() + " (uid " +
                             std::to_string(owner.st_uid) + ")");
  }
}

std::string mib(std::uint64_t bytes) {
  return std::to_string(bytes >> 20U) + " MiB";
}

/// A bar redrawn in place on a terminal; a line every tenth otherwise.
class ProgressReport {
 public:
  ProgressReport(std::ostream& out, bool terminal) : out_(out), terminal_(terminal) {}

  void operator()(const ImagePullState& state) {
    const auto percent = state.total > 0 ? state.bytes * 100 / state.total : 0;
    if (terminal_) {
      const auto filled = static_cast<std::size_t>(percent * 30 / 100);
      out_ << "\r[" << std::string(filled, '#') << std::string(30 - filled, '-') << "] "
           << std::setw(3) << percent << "% " << mib(state.bytes) << " of "
           << (state.total > 0 ? mib(state.total) : std::string("?")) << std::flush;
    } else if (percent / 10 != last_tenth_) {
      last_tenth_ = percent / 10;
      out_ << "downloaded " << mib(state.bytes) << " (" << percent << "%)\n";
    }
  }
  void done() {
    if (terminal_) {
      out_ << "\n";
    }
  }

 private:
  std::ostream& out_;
  bool terminal_;
  std::uint64_t last_tenth_ = 0;
};

/// Bytes of a download that is kept to resume, if there is one.
std::uint64_t partial_bytes(const AgentConfig& config, const std::string& image) {
  std::uint64_t bytes = 0;
  std::error_code ec;
  const auto prefix = "garm-image-" + image + "-";
  for (fs::directory_iterator it(config.state_dir / "images" / "downloads", ec), end;
       !ec && it != end; it.increment(ec)) {
    if (it->path().filename().string().starts_with(prefix)) {
      bytes += it->file_size(ec);
    }
  }
  return bytes;
}

int list(const AgentConfig& config, ImageStore& store, std::ostream& out) {
  out << std::left << std::setw(20) << "IMAGE" << std::setw(16) << "STATE" << std::setw(26)
      << "DIGEST"
      << "BASE OR SOURCE\n";
  for (const auto& image : config.images) {
    const auto base = image.source ? store.ready(image.name) : std::nullopt;
    const auto state = image.source ? store.state(image.name) : std::nullopt;
    std::string phase = "local";
    std::string where = image.base_path.empty() ? image.base_volume : image.base_path;
    if (image.source) {
      const auto partial = partial_bytes(config, image.name);
      phase = base ? "ready" : partial > 0 ? "partial " + mib(partial) : "not pulled";
      where = base ? base->path : image.source->url;
    }
    const auto digest = state && !state->digest.empty() ? state->digest.substr(0, 23) : "-";
    out << std::setw(20) << image.name << std::setw(16) << phase << std::setw(26) << digest << where
        << "\n";
  }
  return 0;
}

/// Ctrl-C or SIGTERM during a pull stops it the way the agent's stop does: the download ends,
/// xz and qemu-img (process groups of their own, which a terminal's signal misses) are killed,
/// and the download is kept to resume.
class StopOnSignal {
 public:
  explicit StopOnSignal(ImageStore& store) {
    sigset_t signals;
    ::sigemptyset(&signals);
    ::sigaddset(&signals, SIGINT);
    ::sigaddset(&signals, SIGTERM);
    ::pthread_sigmask(SIG_BLOCK, &signals, nullptr);
    waiter_ = std::thread([signals, &store] {
      int received = 0;
      ::sigwait(&signals, &received);
      store.stop();
    });
  }
  ~StopOnSignal() {
    ::pthread_kill(waiter_.native_handle(), SIGTERM);  // ends sigwait; the pull is over anyway
    waiter_.join();
  }
  StopOnSignal(const StopOnSignal&) = delete;
  StopOnSignal& operator=(const StopOnSignal&) = delete;

 private:
  std::thread waiter_;
};

bool base_in_use(const std::vector<InstanceRecord>& records, const ImageStore& store,
                 const std::string& path) {
  return std::any_of(records.begin(), records.end(), [&](const InstanceRecord& record) {
    return record.base_path == path || (record.base_path.empty() && store.pulls(record.image));
  });
}

}  // namespace

int images_command(const std::string& action, const std::string& image, const Options& options,
                   std::ostream& out) {
  const auto config = load_agent_config(options.require("--config"));
  become_state_owner(config.state_dir);
  StderrLogger log;
  PulledImages images(config, default_base_directory(config), log);
  auto& store = images.store();
  if (action == "list") {
    return list(config, store, out);
  }
  if (!store.pulls(image)) {
    throw UsageError("image \"" + image + "\" has no source in " + options.require("--config"));
  }
  if (action == "pull") {
    const StopOnSignal stop_on_signal(store);
    ProgressReport progress(out, ::isatty(STDOUT_FILENO) == 1);
    const auto state = store.pull_now(image, std::ref(progress));
    progress.done();
    out << image << ": " << state.digest << " is ready at " << store.ready(image)->path << "\n";
    return 0;
  }
  FileInstanceStore instances(config.state_dir);
  const auto records = instances.list();
  for (const auto& path : store.remove(
           image, [&](const std::string& base) { return base_in_use(records, store, base); })) {
    out << "removed " << path << "\n";
  }
  return 0;
}

}  // namespace garm_edge::agent
