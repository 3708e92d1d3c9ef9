#include "agent/images/pull_room.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <sys/statvfs.h>

#include "agent/images/image_fetcher.hpp"
#include "agent/images/image_files.hpp"

namespace garm_edge::agent {
namespace fs = std::filesystem;

std::uint64_t HostPullDisk::room(const fs::path& directory) const {
  struct statvfs facts {};
  if (::statvfs(directory.c_str(), &facts) != 0) {
    throw ImagePullError("the free space of " + directory.string() + ": " + std::strerror(errno));
  }
  const auto free = static_cast<std::uint64_t>(facts.f_bavail) * facts.f_frsize;
  if (quota_ == 0) {
    return free;
  }
  std::uint64_t used = 0;
  for (const auto& counted : counted_) {
    used += bytes_under(counted, kImageFilePrefix);
  }
  return std::min(free, quota_ > used ? quota_ - used : 0);
}

std::unique_ptr<PullRoom::Hold> PullRoom::hold(const fs::path& directory, const fs::path& file,
                                               std::uint64_t bytes, const std::string& what) {
  std::lock_guard guard(mutex_);
  const Held wanted{.file = file, .bytes = bytes};
  const auto need = still_to_write(wanted);
  const auto held = held_bytes(0);
  const auto room = room_less(directory, held);
  if (need > room) {
    throw ImagePullError("no room for " + what + ": it needs " + mib(need) + ", " + mib(room) +
                         " are left" +
                         (held > 0 ? " (" + mib(held) + " held by other pulls)" : ""));
  }
  const auto id = next_id_++;
  auto hold = std::make_unique<Hold>(*this, id);
  holds_.emplace(id, wanted);
  return hold;
}

PullRoom::Hold::~Hold() {
  std::lock_guard guard(room_->mutex_);
  room_->holds_.erase(id_);
}

std::uint64_t PullRoom::left(const fs::path& directory, const Hold* own) const {
  std::lock_guard guard(mutex_);
  return room_less(directory, held_bytes(own == nullptr ? 0 : own->id()));
}

std::uint64_t PullRoom::still_to_write(const Held& hold) {
  std::error_code ec;
  const auto size = fs::file_size(hold.file, ec);
  if (ec) {
    return hold.bytes;  // nothing written yet
  }
  return size >= hold.bytes ? 0 : hold.bytes - size;
}

std::uint64_t PullRoom::room_less(const fs::path& directory, std::uint64_t held) const {
  const auto room = disk_.room(directory);
  return room > held ? room - held : 0;
}

std::uint64_t PullRoom::held_bytes(std::uint64_t except) const {
  std::uint64_t held = 0;
  for (const auto& [id, hold] : holds_) {
    held += id == except ? 0 : still_to_write(hold);
  }
  return held;
}

}  // namespace garm_edge::agent
