#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace garm_edge::agent {

/// The disk the pulls may take, asked before and during a download.
class PullDisk {
 public:
  virtual ~PullDisk() = default;
  /// Bytes that may still be written under `directory` (free space, less the quota's use).
  virtual std::uint64_t room(const std::filesystem::path& directory) const = 0;
};

/// statvfs's free space, capped by [pull] quota_gib less what the pulled bases and downloads
/// under the two directories hold.
class HostPullDisk final : public PullDisk {
 public:
  HostPullDisk(std::uint64_t quota_bytes, std::vector<std::filesystem::path> counted)
      : quota_(quota_bytes), counted_(std::move(counted)) {}
  std::uint64_t room(const std::filesystem::path& directory) const override;

 private:
  std::uint64_t quota_;
  std::vector<std::filesystem::path> counted_;
};

/// The disk's room as the pulls under way share it: bytes one pull is about to write into a
/// file (a download, an unpacked image, a converted base) are held against the room the other
/// pulls see until the hold ends. What the file holds already is no longer held: the disk
/// counts it. Two pulls never count the same free bytes.
class PullRoom {
 public:
  class Hold {
   public:
    Hold(PullRoom& room, std::uint64_t id) : room_(&room), id_(id) {}
    ~Hold();
    Hold(const Hold&) = delete;
    Hold& operator=(const Hold&) = delete;
    std::uint64_t id() const { return id_; }

   private:
    PullRoom* room_;
    std::uint64_t id_;
  };

  explicit PullRoom(PullDisk& disk) : disk_(disk) {}

  /// Throws ImagePullError ("no room for `what`…") when the room left is short.
  [[nodiscard]] std::unique_ptr<Hold> hold(const std::filesystem::path& directory,
                                           const std::filesystem::path& file, std::uint64_t bytes,
                                           const std::string& what);
  /// The disk's room under `directory` less what pulls hold, `own`'s hold not counted.
  std::uint64_t left(const std::filesystem::path& directory, const Hold* own = nullptr) const;

 private:
  struct Held {
    std::filesystem::path file;
    std::uint64_t bytes = 0;
  };
  /// The bytes not yet in the hold's file (all of them while it does not exist).
  static std::uint64_t still_to_write(const Held& hold);
  /// What the holds other than `except` still hold (mutex_ held).
  std::uint64_t held_bytes(std::uint64_t except) const;
  /// The disk's room under `directory` less `held`, never below zero.
  std::uint64_t room_less(const std::filesystem::path& directory, std::uint64_t held) const;

  PullDisk& disk_;
  mutable std::mutex mutex_;  // holds_, and each look at the room with them
  std::map<std::uint64_t, Held> holds_;
  std::uint64_t next_id_ = 1;
};

}  // namespace garm_edge::agent
