#include "common/subprocess.hpp"

#include <array>
#include <cerrno>
#include <csignal>
#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <system_error>
#include <unistd.h>

#include "common/unique_fd.hpp"

namespace garm_edge {
namespace {

constexpr const char* kSystemPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

std::system_error system_error(const std::string& what) {
  return {errno, std::generic_category(), what};
}

/// argv[0] as given when it names a path, else find_system_program's.
std::string resolve_program(const std::string& name) {
  if (name.find('/') != std::string::npos) {
    return name;
  }
  if (auto found = find_system_program(name)) {
    return *found;
  }
  errno = ENOENT;
  throw system_error(name + " is not installed (looked in " + kSystemPath + ")");
}

/// Owns the posix_spawn attribute and file action objects.
class SpawnSetup {
 public:
  SpawnSetup() {
    ::posix_spawnattr_init(&attributes_);
    ::posix_spawn_file_actions_init(&actions_);
  }
  ~SpawnSetup() {
    ::posix_spawn_file_actions_destroy(&actions_);
    ::posix_spawnattr_destroy(&attributes_);
  }
  SpawnSetup(const SpawnSetup&) = delete;
  SpawnSetup& operator=(const SpawnSetup&) = delete;

  /// Own process group (so a kill reaches its children), no blocked signals, and every
  /// signal at its default: an ignored SIGPIPE would otherwise be inherited across exec.
  void isolate() {
    sigset_t none;
    sigset_t all;
    ::sigemptyset(&none);
    ::sigfillset(&all);
    ::posix_spawnattr_setsigmask(&attributes_, &none);
    ::posix_spawnattr_setsigdefault(&attributes_, &all);
    ::posix_spawnattr_setpgroup(&attributes_, 0);
    ::posix_spawnattr_setflags(
        &attributes_,
        static_cast<short>(POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF));
  }
  void wire(int output_write, int stdout_fd) {
    ::posix_spawn_file_actions_addopen(&actions_, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
    ::posix_spawn_file_actions_adddup2(&actions_, stdout_fd >= 0 ? stdout_fd : output_write,
                                       STDOUT_FILENO);
    ::posix_spawn_file_actions_adddup2(&actions_, output_write, STDERR_FILENO);
  }

  pid_t spawn(const std::string& program, const std::vector<std::string>& argv) {
    std::vector<char*> args;
    for (const auto& arg : argv) {
      args.push_back(const_cast<char*>(arg.c_str()));
    }
    args.push_back(nullptr);
    std::array<char*, 3> environment{const_cast<char*>("PATH=/usr/sbin:/usr/bin:/sbin:/bin"),
                                     const_cast<char*>("LC_ALL=C"), nullptr};
    pid_t pid = 0;
    const int rc = ::posix_spawn(&pid, program.c_str(), &actions_, &attributes_, args.data(),
                                 environment.data());
    if (rc != 0) {
      errno = rc;
      throw system_error("starting " + program);
    }
    return pid;
  }

 private:
  posix_spawnattr_t attributes_{};
  posix_spawn_file_actions_t actions_{};
};

/// Reads the output until it ends, killing the group at the deadline or on stop.
void collect_output(int fd, pid_t pid, const ProcessOptions& options,
                    std::chrono::steady_clock::time_point deadline, ProcessResult& result) {
  std::array<char, 4096> buffer{};
  bool killed = false;
  for (;;) {
    if (!killed) {
      result.stopped = options.stop != nullptr && options.stop->load();
      result.timed_out = !result.stopped && std::chrono::steady_clock::now() >= deadline;
      if (result.stopped || result.timed_out) {
        ::kill(-pid, SIGKILL);
        killed = true;
      }
    }
    pollfd ready{.fd = fd, .events = POLLIN, .revents = 0};
    const int polled = ::poll(&ready, 1, 100);
    if (polled < 0 && errno != EINTR) {
      throw system_error("waiting for the output of process " + std::to_string(pid));
    }
    if (polled <= 0) {
      continue;
    }
    const auto got = ::read(fd, buffer.data(), buffer.size());
    if (got < 0 && errno == EINTR) {
      continue;
    }
    if (got <= 0) {
      return;
    }
    const auto keep =
        std::min(static_cast<std::size_t>(got),
                 options.max_output - std::min(options.max_output, result.output.size()));
    result.output.append(buffer.data(), keep);
  }
}

/// Its exit, however long a process that closed its output takes to end (within the same
/// deadline, then killed).
int reap(pid_t pid, const ProcessOptions& options, std::chrono::steady_clock::time_point deadline,
         ProcessResult& result) {
  int status = 0;
  for (;;) {
    const auto done = ::waitpid(pid, &status, WNOHANG);
    if (done == pid) {
      return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    }
    if (done < 0 && errno != EINTR) {
      throw system_error("waiting for process " + std::to_string(pid));
    }
    const bool stop = options.stop != nullptr && options.stop->load();
    if (stop || std::chrono::steady_clock::now() >= deadline) {
      result.stopped = result.stopped || stop;
      result.timed_out = result.timed_out || !stop;
      ::kill(-pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return -1;
    }
    ::usleep(20'000);
  }
}

}  // namespace

std::optional<std::string> find_system_program(const std::string& name) {
  const std::string_view path = kSystemPath;
  for (std::size_t start = 0; start <= path.size();) {
    const auto end = std::min(path.find(':', start), path.size());
    const auto candidate = std::string(path.substr(start, end - start)) + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) {
      return candidate;
    }
    start = end + 1;
  }
  return std::nullopt;
}

std::string system_program_path() {
  return kSystemPath;
}

ProcessResult run_process(const std::vector<std::string>& argv, const ProcessOptions& options) {
  if (argv.empty()) {
    throw std::invalid_argument("run_process needs a program");
  }
  const auto program = resolve_program(argv.front());
  const auto deadline = std::chrono::steady_clock::now() + options.timeout;
  std::array<int, 2> pipe_fds{};
  if (::pipe2(pipe_fds.data(), O_CLOEXEC) != 0) {
    throw system_error("making a pipe for " + program);
  }
  UniqueFd output_read(pipe_fds[0]);
  UniqueFd output_write(pipe_fds[1]);
  SpawnSetup setup;
  setup.isolate();
  setup.wire(output_write.get(), options.stdout_fd);
  const pid_t pid = setup.spawn(program, argv);
  ::close(output_write.release());
  ProcessResult result;
  try {
    collect_output(output_read.get(), pid, options, deadline, result);
  } catch (...) {
    ::kill(-pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    throw;
  }
  result.exit_code = reap(pid, options, deadline, result);
  return result;
}

}  // namespace garm_edge
