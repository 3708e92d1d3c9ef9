#include "agent/daemon/images_command.hpp"

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <functional>
#include <grp.h>
#include <iomanip>
#include <iostream>
#include <ostream>
#include <pthread.h>
#include <pwd.h>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

#include "agent/base/config.hpp"
#include "agent/base/log.hpp"
#include "agent/daemon/image_operations.hpp"
#include "agent/images/pulled_images.hpp"
#include "agent/instances/instance_store.hpp"
#include "common/durable_file.hpp"
#include "net/admin_client.hpp"

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

/// A bar redrawn in place on a terminal; a line every tenth otherwise.
class ProgressReport {
 public:
  ProgressReport(std::ostream& out, bool terminal) : out_(out), terminal_(terminal) {}

  void operator()(const ImagePullState& state) {
    drawn_ = true;
    const auto percent = state.total > 0 ? state.bytes * 100 / state.total : 0;
    if (terminal_) {
      const auto filled = static_cast<std::size_t>(percent * 30 / 100);
      out_ << "\r[" << std::string(filled, '#') << std::string(30 - filled, '-') << "] "
           << std::setw(3) << percent << "% " << in_mib(state.bytes) << " of "
           << (state.total > 0 ? in_mib(state.total) : std::string("?")) << std::flush;
    } else if (percent / 10 != last_tenth_) {
      last_tenth_ = percent / 10;
      out_ << "downloaded " << in_mib(state.bytes) << " (" << percent << "%)\n";
    }
  }
  void done() {
    if (terminal_) {
      out_ << "\n";
    }
  }
  /// After the running agent's answer: a bar drawn only if progress came.
  void done_if_drawn() {
    if (drawn_) {
      done();
    }
  }

 private:
  std::ostream& out_;
  bool terminal_;
  std::uint64_t last_tenth_ = 0;
  bool drawn_ = false;
};

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

/// The images commands with no agent running: this process works on the state itself.
int images_alone(const AgentConfig& config, const std::string& action, const std::string& image,
                 std::ostream& out) {
  if (action == "list" && !fs::exists(config.state_dir / "images")) {
    out << image_list(config, nullptr);  // nothing pulled yet: nothing to make for a look
    return 0;
  }
  StderrLogger log;
  if (action == "list") {  // a look needs no qemu-img: make_pulled_images would ask for it
    PulledImages images(config, default_base_directory(config), log);
    out << image_list(config, &images.store());
    return 0;
  }
  make_private_directory(config.state_dir);  // a host where the agent never ran
  const auto images = make_pulled_images(config, log);
  auto& store = images->store();
  if (action == "pull") {
    const StopOnSignal stop_on_signal(store);
    ProgressReport progress(out, ::isatty(STDOUT_FILENO) == 1);
    const auto state = store.pull_now(image, std::ref(progress));
    progress.done();
    out << pulled_line(store, image, state);
    return 0;
  }
  FileInstanceStore instances(config.state_dir);
  const auto records = instances.list();
  out << remove_image(store, image,
                      [&](const std::string& base) { return base_in_use(records, store, base); });
  return 0;
}

}  // namespace

int images_command(const std::string& action, const std::string& image, const Options& options,
                   std::ostream& out) {
  const auto config = load_agent_config(options.require("--config"));
  const bool pulled =
      std::any_of(config.images.begin(), config.images.end(),
                  [&](const ImageConfig& each) { return each.name == image && each.source; });
  if (action != "list" && !pulled) {
    throw UsageError("image \"" + image + "\" has no source in " + options.require("--config"));
  }
  ProgressReport progress(out, ::isatty(STDOUT_FILENO) == 1);
  const auto answered = net::ask_running_daemon(
      config.state_dir, {.command = "images", .action = action, .name = image},
      [&](std::uint64_t bytes, std::uint64_t total) {
        ImagePullState state;
        state.bytes = bytes;
        state.total = total;
        progress(state);
      });
  if (answered) {
    progress.done_if_drawn();
    return net::print_admin_result(*answered, "images " + action, out, std::cerr);
  }
  become_state_owner(config.state_dir);
  return images_alone(config, action, image, out);
}

}  // namespace garm_edge::agent
