#pragma once

#include <chrono>
#include <filesystem>

#include "common/unique_fd.hpp"

namespace garm_edge::net {

/// A listening UNIX stream socket at `path`, mode 0600, replacing a socket left there by an
/// earlier run (the caller holds the state directory's lock, so none serves it). A path longer
/// than sun_path holds is reached through /proc/self/fd. Throws std::system_error.
UniqueFd listen_unix(const std::filesystem::path& path);

/// A connected socket, or -1 with errno set (ENOENT, ECONNREFUSED: nothing listens there).
UniqueFd connect_unix(const std::filesystem::path& path);

/// The uid of the process at the other end of a connected UNIX socket; -1 when unknown.
long peer_uid(int fd);

/// Sends and receives on `fd` give up after `timeout` (SO_SNDTIMEO, SO_RCVTIMEO).
void set_io_timeout(int fd, std::chrono::milliseconds timeout);

}  // namespace garm_edge::net
