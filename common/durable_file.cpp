#include "common/durable_file.hpp"

#include <atomic>
#include <cerrno>
#include <charconv>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/unique_fd.hpp"

namespace garm_edge {
namespace {

namespace fs = std::filesystem;

[[noreturn]] void fail_errno(const std::string& what) {
  throw DurableFileError(what + ": " + std::strerror(errno));
}

void write_all(int fd, std::string_view data, const fs::path& path) {
  while (!data.empty()) {
    const ssize_t written = ::write(fd, data.data(), data.size());
    if (written < 0) {
      if (errno == EINTR) {
        continue;
      }
      fail_errno("cannot write " + path.string());
    }
    data.remove_prefix(static_cast<std::size_t>(written));
  }
}

}  // namespace

void make_private_directory(const fs::path& path) {
  if (::mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) {
    fail_errno("cannot create directory " + path.string());
  }
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0 || !S_ISDIR(info.st_mode)) {
    throw DurableFileError(path.string() + " is not a directory");
  }
  // A directory someone else made first, or left open, is not private: what is kept there
  // (token digests, certificates, kept deletes) could be read or replaced.
  if ((info.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    throw DurableFileError(path.string() + " is writable by other users (chmod go-w " +
                           path.string() + ")");
  }
  if (::geteuid() != 0 && info.st_uid != ::geteuid()) {
    throw DurableFileError(path.string() + " belongs to uid " + std::to_string(info.st_uid) +
                           ", not to this process's uid " + std::to_string(::geteuid()));
  }
}

void fsync_directory(const fs::path& directory) {
  const UniqueFd dir(::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir.get() < 0 || ::fsync(dir.get()) != 0) {
    fail_errno("cannot sync directory " + directory.string());
  }
}

namespace {

/// Gives `file` (open at `temp`) its `mode`, syncs its bytes, closes it, renames it over
/// `target` and syncs the directory: what write_atomically and publish_file share.
void sync_and_rename(UniqueFd file, const fs::path& temp, const fs::path& target, mode_t mode) {
  if (::fchmod(file.get(), mode) != 0) {
    fail_errno("cannot set the mode of " + temp.string());
  }
  if (::fsync(file.get()) != 0) {
    fail_errno("cannot sync " + temp.string());
  }
  if (::close(file.release()) != 0) {
    fail_errno("cannot close " + temp.string());
  }
  if (::rename(temp.c_str(), target.c_str()) != 0) {
    fail_errno("cannot rename " + temp.string() + " to " + target.string());
  }
  fsync_directory(target.parent_path());
}

}  // namespace

void write_atomically(const fs::path& target, std::string_view contents, mode_t mode) {
  static std::atomic<unsigned> counter{0};
  const fs::path temp = target.parent_path() /
                        ("." + target.filename().string() + ".tmp." + std::to_string(::getpid()) +
                         "." + std::to_string(counter.fetch_add(1)));
  UniqueFd file(::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (file.get() < 0) {
    fail_errno("cannot create " + temp.string());
  }
  try {
    write_all(file.get(), contents, temp);
    sync_and_rename(std::move(file), temp, target, mode);
  } catch (...) {
    ::unlink(temp.c_str());  // gone already when only the directory's sync failed
    throw;
  }
}

void publish_file(const fs::path& temp, const fs::path& target, mode_t mode) {
  UniqueFd file(::open(temp.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (file.get() < 0) {
    fail_errno("cannot open " + temp.string());
  }
  sync_and_rename(std::move(file), temp, target, mode);
}

std::optional<std::string> read_file(const fs::path& path) {
  const UniqueFd file(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (file.get() < 0) {
    if (errno == ENOENT) {
      return std::nullopt;
    }
    fail_errno("cannot open " + path.string());
  }
  std::string text;
  char buffer[8192];
  for (;;) {
    const ssize_t got = ::read(file.get(), buffer, sizeof buffer);
    if (got < 0) {
      if (errno == EINTR) {
        continue;
      }
      fail_errno("cannot read " + path.string());
    }
    if (got == 0) {
      return text;
    }
    text.append(buffer, static_cast<std::size_t>(got));
  }
}

namespace {

/// The writer of a temp file of write_atomically (".<name>.tmp.<pid>.<n>"); 0 when the name is
/// not one.
pid_t writer_of(const std::string& name) {
  const auto at = name.rfind(".tmp.");
  if (name.empty() || name.front() != '.' || at == std::string::npos) {
    return 0;
  }
  const auto digits = name.substr(at + 5, name.find('.', at + 5) - (at + 5));
  pid_t pid = 0;
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), pid);
  return error == std::errc() && end == digits.data() + digits.size() ? pid : 0;
}

}  // namespace

void remove_stale_temp_files(const fs::path& directory) {
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(directory, error)) {
    const auto pid = writer_of(entry.path().filename().string());
    // Only a writer that is gone left it: another process may be writing its own right now.
    if (pid > 0 && pid != ::getpid() && ::kill(pid, 0) != 0 && errno == ESRCH) {
      fs::remove(entry.path(), error);
    }
  }
}

std::optional<UniqueFd> lock_exclusively(const fs::path& path) {
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  if (fd.get() < 0) {
    fail_errno("cannot open " + path.string());
  }
  if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK) {
      return std::nullopt;
    }
    fail_errno("cannot lock " + path.string());
  }
  return fd;
}

}  // namespace garm_edge
