#include "agent/runner_archives/archive_shelf.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <system_error>

#include "common/durable_file.hpp"
#include "common/unique_fd.hpp"
#include "net/secret_token.hpp"

namespace garm_edge::agent {
namespace fs = std::filesystem;
namespace {

bool is_sha256_name(const std::string& name) {
  return name.size() == 64 && std::all_of(name.begin(), name.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

}  // namespace

ArchiveShelf::ArchiveShelf(fs::path directory, std::uint64_t max_bytes, const Clock& clock,
                           Logger& log)
    : directory_(std::move(directory)), max_bytes_(max_bytes), clock_(clock), log_(log) {}

void ArchiveShelf::scan() {
  fs::create_directories(directory_);
  fs::permissions(directory_, fs::perms::owner_all, fs::perm_options::replace);
  for (const auto& item : fs::directory_iterator(directory_)) {
    const auto name = item.path().filename().string();
    if (name.ends_with(".part")) {
      fs::remove(item.path());  // a download the last run did not finish
    } else if (is_sha256_name(name) && item.is_regular_file()) {
      struct stat info {};
      if (::stat(item.path().c_str(), &info) == 0) {
        entries_[name] = {.size = static_cast<std::uint64_t>(info.st_size),
                          .last_used = std::chrono::system_clock::from_time_t(info.st_mtime)};
      }
    }
  }
  make_room(0);
}

fs::path ArchiveShelf::part_path(const std::string& sha256) const {
  return directory_ / (sha256 + "." + net::random_token() + ".part");
}

bool ArchiveShelf::make_room(std::uint64_t incoming, const std::string& keep) {
  const auto kept = entries_.find(keep);
  const auto pinned = part_bytes_ + (kept == entries_.end() ? 0 : kept->second.size);
  if (pinned > max_bytes_ || incoming > max_bytes_ - pinned) {
    return false;  // evicting every other archive would not do: evict none
  }
  while (true) {
    if (part_bytes_ + bytes() + incoming <= max_bytes_) {
      return true;
    }
    auto oldest = entries_.end();
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      if (it->first != keep &&
          (oldest == entries_.end() || it->second.last_used < oldest->second.last_used)) {
        oldest = it;
      }
    }
    if (oldest == entries_.end()) {
      return false;
    }
    std::error_code ignored;  // a file being served stays readable through its descriptor
    fs::remove(path_of(oldest->first), ignored);
    log_.info("runner archive cache: evicted " + oldest->first + " (" +
              std::to_string(oldest->second.size) + " bytes, least recently used)");
    entries_.erase(oldest);
    ++evictions_;
  }
}

std::string ArchiveShelf::keep(const fs::path& part, const std::string& sha256,
                               std::uint64_t size) {
  make_room(size, sha256);
  // Under the cache's lock: the part file was synced outside it, so what waits here is the
  // rename and the directory's sync.
  try {
    publish_file(part, path_of(sha256), 0600);
  } catch (const DurableFileError& e) {
    std::error_code ec;
    if (!fs::is_regular_file(path_of(sha256), ec)) {
      return std::string("keeping the archive: ") + e.what();
    }
    // Renamed, but the directory's sync failed: the archive is here and must be counted.
    log_.warning("runner archive cache: " + sha256 + " kept, but " + e.what());
  }
  entries_[sha256] = {.size = size, .last_used = clock_.now()};
  return "";
}

std::shared_ptr<net::FileBody> ArchiveShelf::open(const std::string& sha256) {
  const auto it = entries_.find(sha256);
  if (it == entries_.end()) {
    return nullptr;
  }
  UniqueFd fd(::open(path_of(sha256).c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    log_.warning("runner archive cache: " + sha256 +
                 " vanished from disk: " + std::strerror(errno));
    entries_.erase(it);
    return nullptr;
  }
  it->second.last_used = clock_.now();
  ::futimens(fd.get(), nullptr);  // the recency survives a restart
  return std::make_shared<net::FileBody>(
      net::FileBody{.fd = std::move(fd), .size = it->second.size});
}

std::uint64_t ArchiveShelf::bytes() const {
  std::uint64_t total = 0;
  for (const auto& [sha, entry] : entries_) {
    total += entry.size;
  }
  return total;
}

}  // namespace garm_edge::agent
