#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include "agent/base/clock.hpp"
#include "agent/base/log.hpp"
#include "net/http_response.hpp"

namespace garm_edge::agent {

/// The runner archives on disk, each a file named by its SHA-256, and the part files of the
/// downloads under way, counted together against one size: least recently used archives go
/// first to make room. Not thread-safe: the archive cache's lock guards it.
class ArchiveShelf {
 public:
  ArchiveShelf(std::filesystem::path directory, std::uint64_t max_bytes, const Clock& clock,
               Logger& log);

  /// Creates the directory (0700), removes part files an earlier run left, learns the archives
  /// there and evicts down to the size. Throws std::filesystem::filesystem_error.
  void scan();
  /// A new part file's name for a download of `sha256`.
  std::filesystem::path part_path(const std::string& sha256) const;
  bool contains(const std::string& sha256) const { return entries_.contains(sha256); }
  /// Could a part file of `size` bytes fit beside the other part files at all?
  bool could_fit_part(std::uint64_t size) const { return size <= max_bytes_ - part_bytes_; }
  /// Evicts least recently used archives until `incoming` more bytes fit beside the archives
  /// and the part files; never `keep`. False when they cannot (then it evicts none).
  bool make_room(std::uint64_t incoming, const std::string& keep = "");
  void add_part_bytes(std::uint64_t bytes) { part_bytes_ += bytes; }
  void remove_part_bytes(std::uint64_t bytes) { part_bytes_ -= bytes; }
  /// Puts a verified part file in place as `sha256` (publish_file: mode 0600, synced, renamed,
  /// the directory synced) and counts it. Returns why it could not; an archive that was renamed
  /// before a later step failed is kept and counted.
  std::string keep(const std::filesystem::path& part, const std::string& sha256,
                   std::uint64_t size);
  /// The archive, opened and marked as just used; null when it is not there.
  std::shared_ptr<net::FileBody> open(const std::string& sha256);

  std::size_t archives() const { return entries_.size(); }
  std::uint64_t bytes() const;
  std::uint64_t part_bytes() const { return part_bytes_; }
  std::uint64_t evictions() const { return evictions_; }
  const std::filesystem::path& directory() const { return directory_; }

 private:
  struct Entry {
    std::uint64_t size = 0;
    std::chrono::system_clock::time_point last_used;
  };
  std::filesystem::path path_of(const std::string& sha256) const { return directory_ / sha256; }

  std::filesystem::path directory_;
  std::uint64_t max_bytes_;
  const Clock& clock_;
  Logger& log_;
  std::map<std::string, Entry> entries_;  // by SHA-256
  std::uint64_t part_bytes_ = 0;
  std::uint64_t evictions_ = 0;
};

}  // namespace garm_edge::agent
