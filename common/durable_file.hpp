#pragma once

#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <sys/types.h>

#include "common/unique_fd.hpp"

namespace garm_edge {

/// A file or directory that could not be read, written or synced; the message names it and
/// says why.
class DurableFileError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Creates `path` (0700) unless it exists; throws when it cannot be made, is no directory, is
/// writable by the group or others, or (for a process that is not root) belongs to another user.
void make_private_directory(const std::filesystem::path& path);

/// Makes a rename or unlink in `directory` survive a power cut.
void fsync_directory(const std::filesystem::path& directory);

/// Writes `contents` to a temp file beside `target` (0600), syncs it and renames it over
/// `target`: a reader sees the old file or the whole new one, also after a crash.
void write_atomically(const std::filesystem::path& target, std::string_view contents,
                      mode_t mode = 0600);

/// Puts a finished file in place: gives `temp` its `mode`, syncs its bytes, renames it over
/// `target` and syncs the directory, so a reader (and the host after a power cut) sees the old
/// file or the whole new one, never a name whose bytes never reached the disk. The one way
/// image bases, cache generations and runner archives are swapped in. Throws
/// DurableFileError; `temp` is left for the caller to remove then.
void publish_file(const std::filesystem::path& temp, const std::filesystem::path& target,
                  mode_t mode);

/// The whole file; nothing when it does not exist. Throws when it exists but cannot be read.
std::optional<std::string> read_file(const std::filesystem::path& path);

/// An exclusive flock on `path` (made 0600 if missing), held while the descriptor is open;
/// nothing when another process holds it. Throws when the file cannot be opened or locked.
std::optional<UniqueFd> lock_exclusively(const std::filesystem::path& path);

/// Temp files of writes a crash interrupted (their rename never happened, so they hold
/// nothing promised), removed.
void remove_stale_temp_files(const std::filesystem::path& directory);

}  // namespace garm_edge
