#include "net/admin_server.hpp"

#include <cstring>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <system_error>
#include <unistd.h>

#include "common/text.hpp"
#include "net/unix_socket.hpp"

namespace garm_edge::net {
namespace {

constexpr auto kRequestDeadline = std::chrono::seconds(5);
constexpr auto kKeepaliveEvery = std::chrono::seconds(2);

bool may_command(long uid) {
  return uid == 0 || uid == static_cast<long>(::geteuid());
}

/// The request line, or why there is none (too long, too slow, closed).
/// The whole line within kRequestDeadline: a caller trickling a byte at a time holds one of
/// the command slots no longer than that.
std::string read_request_line(int fd) {
  const auto deadline = std::chrono::steady_clock::now() + kRequestDeadline;
  std::string line;
  char buffer[512];
  while (line.find('\n') == std::string::npos) {
    if (line.size() > kAdminLineLimit) {
      throw std::invalid_argument("the request is longer than " + std::to_string(kAdminLineLimit) +
                                  " bytes");
    }
    const auto got = ::recv(fd, buffer, sizeof buffer, 0);
    if (got <= 0 || std::chrono::steady_clock::now() > deadline) {
      throw std::invalid_argument("no request line within " +
                                  std::to_string(kRequestDeadline.count()) + " s");
    }
    line.append(buffer, static_cast<std::size_t>(got));
  }
  return line.substr(0, line.find('\n'));
}

std::string result_line(AdminResult result) {
  return AdminReplyLine{.progress = std::nullopt, .result = std::move(result)}.to_line();
}

}  // namespace

struct AdminServer::Connection {
  explicit Connection(UniqueFd socket) : fd(std::move(socket)) {}
  UniqueFd fd;
  std::mutex write_mutex;
  bool gone = false;  // the caller closed or stopped reading: nothing more is sent
  std::atomic<bool> finished{false};
  std::thread thread;
};

AdminServer::AdminServer(const std::filesystem::path& path, Handler handler, Logger& log,
                         std::string daemon)
    : path_(path),
      handler_(std::move(handler)),
      log_(log),
      daemon_(std::move(daemon)),
      listener_(listen_unix(path)) {
  if (::pipe2(wake_, O_CLOEXEC) != 0) {
    throw std::system_error(errno, std::generic_category(), "pipe");
  }
}

AdminServer::~AdminServer() {
  stop_accepting();
  std::list<std::unique_ptr<Connection>> connections;
  {
    std::lock_guard lock(connections_mutex_);
    connections.swap(connections_);
  }
  for (auto& connection : connections) {
    connection->thread.join();
  }
  ::close(wake_[0]);
  ::close(wake_[1]);
}

void AdminServer::start() {
  acceptor_ = std::thread([this] { accept_loop(); });
}

void AdminServer::stop_accepting() {
  if (!accepting_.exchange(false)) {
    return;
  }
  const char byte = 0;
  [[maybe_unused]] const auto written = ::write(wake_[1], &byte, 1);
  if (acceptor_.joinable()) {
    acceptor_.join();
  }
  std::error_code ignored;
  std::filesystem::remove(path_, ignored);
}

void AdminServer::accept_loop() {
  pollfd watched[2] = {{.fd = listener_.get(), .events = POLLIN, .revents = 0},
                       {.fd = wake_[0], .events = POLLIN, .revents = 0}};
  while (accepting_) {
    const int ready =
        ::poll(watched, 2, static_cast<int>(std::chrono::milliseconds(kKeepaliveEvery).count()));
    if (ready < 0 && errno != EINTR) {
      log_.error(std::string("admin socket: poll: ") + std::strerror(errno));
      return;
    }
    if ((watched[1].revents & POLLIN) != 0) {
      return;
    }
    reap_finished();
    send_keepalives();
    if ((watched[0].revents & POLLIN) != 0) {
      accept_one();
    }
  }
}

void AdminServer::accept_one() {
  UniqueFd fd(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
  if (fd.get() < 0) {
    return;  // the caller gave up already, or descriptors ran out: the next one may do
  }
  set_io_timeout(fd.get(), kRequestDeadline);
  const auto uid = peer_uid(fd.get());
  auto connection = std::make_unique<Connection>(std::move(fd));
  if (!may_command(uid)) {
    log_.warning("admin socket: refused uid " + std::to_string(uid) + " (only root and the " +
                 daemon_ + "'s own account)");
    send(*connection,
         result_line({.exit_code = 1,
                      .output = "",
                      .error = "only root and the " + daemon_ + "'s account may command it"}));
    return;
  }
  std::lock_guard lock(connections_mutex_);
  if (connections_.size() >= kMaxCommands) {
    send(*connection,
         result_line({.exit_code = 1,
                      .output = "",
                      .error = "the " + daemon_ + " runs " + std::to_string(kMaxCommands) +
                               " operator commands already; try again when one is done"}));
    return;
  }
  auto& added = *connections_.emplace_back(std::move(connection));
  added.thread = std::thread([this, &added] {
    serve(added);
    added.finished = true;
  });
}

void AdminServer::serve(Connection& connection) {
  AdminResult result;
  try {
    const auto request = AdminRequest::from_line(read_request_line(connection.fd.get()));
    std::string asked = request.command;
    for (const auto* word : {&request.action, &request.name}) {
      asked += word->empty() ? "" : " " + *word;
    }
    log_.info("admin socket: " + printable_excerpt(asked, 200));  // the caller's words
    result = handler_(request, [&connection](std::uint64_t bytes, std::uint64_t total) {
      send(connection,
           AdminReplyLine{.progress = std::pair{bytes, total}, .result = std::nullopt}.to_line());
    });
  } catch (const std::exception& e) {
    result = {.exit_code = 1, .output = "", .error = e.what()};
  }
  send(connection, result_line(std::move(result)));
}

bool AdminServer::send(Connection& connection, const std::string& line) {
  std::lock_guard lock(connection.write_mutex);
  for (std::size_t sent = 0; !connection.gone && sent < line.size();) {
    const auto wrote =
        ::send(connection.fd.get(), line.data() + sent, line.size() - sent, MSG_NOSIGNAL);
    if (wrote <= 0) {
      connection.gone = true;  // a pull it asked for goes on: the agent finishes it
      break;
    }
    sent += static_cast<std::size_t>(wrote);
  }
  return !connection.gone;
}

void AdminServer::send_keepalives() {
  std::lock_guard lock(connections_mutex_);
  for (auto& connection : connections_) {
    if (!connection->finished) {
      send(*connection, "{}\n");
    }
  }
}

void AdminServer::reap_finished() {
  std::lock_guard lock(connections_mutex_);
  for (auto it = connections_.begin(); it != connections_.end();) {
    if ((*it)->finished) {
      (*it)->thread.join();
      it = connections_.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace garm_edge::net
