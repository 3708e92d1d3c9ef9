#include "net/admin_client.hpp"

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <sys/socket.h>

#include "net/unix_socket.hpp"

namespace garm_edge::net {
namespace {

void send_all(int fd, const std::string& text, const std::filesystem::path& path,
              const std::string& daemon) {
  for (std::size_t sent = 0; sent < text.size();) {
    const auto wrote = ::send(fd, text.data() + sent, text.size() - sent, MSG_NOSIGNAL);
    if (wrote <= 0) {
      throw std::runtime_error("the " + daemon + " at " + path.string() +
                               " closed the admin socket: " + std::strerror(errno));
    }
    sent += static_cast<std::size_t>(wrote);
  }
}

}  // namespace

std::optional<AdminResult> ask_running_daemon(
    const std::filesystem::path& state_dir, const AdminRequest& request,
    const std::function<void(std::uint64_t bytes, std::uint64_t total)>& progress,
    std::chrono::milliseconds silence_limit, const std::string& daemon) {
  const auto path = admin_socket_path(state_dir);
  const auto socket = connect_unix(path);
  if (socket.get() < 0) {
    if (errno == ENOENT || errno == ECONNREFUSED || errno == ENOTDIR) {
      return std::nullopt;  // no daemon runs (or one ended without removing its socket)
    }
    throw std::runtime_error(
        "cannot reach the running " + daemon + " at " + path.string() + ": " +
        std::strerror(errno) +
        (errno == EACCES ? " (run as root or as the " + daemon + "'s account)" : std::string()));
  }
  set_io_timeout(socket.get(), silence_limit);
  send_all(socket.get(), request.to_line(), path, daemon);
  std::string pending;
  char buffer[4096];
  for (;;) {
    for (auto end = pending.find('\n'); end != std::string::npos; end = pending.find('\n')) {
      const auto line = AdminReplyLine::from_line(std::string_view(pending).substr(0, end));
      pending.erase(0, end + 1);
      if (line.result) {
        return line.result;
      }
      if (line.progress && progress) {
        progress(line.progress->first, line.progress->second);
      }
    }
    if (pending.size() > (1U << 20U)) {
      throw std::runtime_error("the " + daemon + "'s answer has a line longer than 1 MiB");
    }
    const auto got = ::recv(socket.get(), buffer, sizeof buffer, 0);
    if (got <= 0) {
      throw std::runtime_error(
          got == 0 ? "the " + daemon + " closed the admin socket before it answered (did it stop?)"
                   : "no word from the " + daemon + " for " +
                         std::to_string(silence_limit.count() / 1000) + " s");
    }
    pending.append(buffer, static_cast<std::size_t>(got));
  }
}

int print_admin_result(const AdminResult& result, const std::string& command, std::ostream& out,
                       std::ostream& err, const std::string& program) {
  out << result.output;
  if (result.exit_code != 0) {
    err << program << " " << command << ": " << result.error << "\n";
  }
  return result.exit_code;
}

}  // namespace garm_edge::net
