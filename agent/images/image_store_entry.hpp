#pragma once

// What image_store.cpp (the images' bookkeeping) and image_pull.cpp (one pull) share: an
// image's entry and the lock a pull holds. Included by those two files only.

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/file.h>

#include "agent/base/retired_files.hpp"
#include "agent/images/image_store.hpp"
#include "common/unique_fd.hpp"

namespace garm_edge::agent {

struct ImageStore::Entry {
  using Clock = std::chrono::steady_clock;
  ImageConfig config;
  // The record: what is on disk, shared with other processes through the file.
  std::string base;
  std::string digest;
  std::string source_url;
  RetiredFiles retired;
  std::string failure;  // why the last pull failed, in whichever process ran it
  // This process's view of the pull.
  ImagePullState::Phase phase = ImagePullState::Phase::pulling;
  std::atomic<std::uint64_t> bytes{0};
  std::atomic<std::uint64_t> total{0};
  std::string error;
  std::optional<Clock::time_point> checked_at;
  std::optional<Clock::time_point> failed_at;
  std::function<void(const ImagePullState&)> progress;
  bool running = false;
  std::thread worker;

  const ImageSourceConfig& source() const { return *config.source; }
  bool base_matches_config() const {
    return !base.empty() && source_url == source().url &&
           (source().sha256.empty() || digest == "sha256:" + source().sha256);
  }
};

/// flock on a file of its own: one pull of an image at a time across processes.
class PullLock {
 public:
  explicit PullLock(const std::filesystem::path& path)
      : fd_(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600)) {
    if (fd_.get() < 0) {
      throw ImagePullError("opening " + path.string() + ": " + std::strerror(errno));
    }
    held_ = ::flock(fd_.get(), LOCK_EX | LOCK_NB) == 0;
  }
  bool held() const { return held_; }

 private:
  UniqueFd fd_;
  bool held_ = false;
};

}  // namespace garm_edge::agent
