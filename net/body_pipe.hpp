#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>

namespace garm_edge::net {

/// A response body made by a blocking thread (a relayed download) and sent by the server's
/// connection as it arrives. At most `capacity` bytes wait between the two, so a body of any
/// size passes through a bounded amount of memory and a slow reader slows the writer down.
class BodyPipe {
 public:
  struct Piece {
    std::string data;
    bool end = false;       // nothing follows `data`
    bool complete = false;  // with `end`: the whole body arrived (else it was cut off)
  };
  using Ready = std::function<void(Piece)>;

  explicit BodyPipe(std::size_t capacity = std::size_t{1} << 20) : capacity_(capacity) {}

  /// Writer: waits while the pipe is full. False when the reader has gone or `deadline` passed
  /// first (the writer should then give up on the body).
  bool write(std::string_view data, std::chrono::steady_clock::time_point deadline);
  /// Writer: the body ends here, whole or (`complete` false) cut off.
  void finish(bool complete);

  /// Reader: `ready` is called exactly once, on this thread or the writer's, with what has
  /// arrived (everything so far) once there is something or the end.
  void read(Ready ready);
  /// Reader: nothing more will be read (its client left); the writer's waits end.
  void abandon();

 private:
  /// What is there for the reader, taken out of the pipe. Called with the mutex held.
  Piece take();

  const std::size_t capacity_;
  std::mutex mutex_;
  std::condition_variable space_;
  std::string buffered_;
  bool finished_ = false;
  bool complete_ = false;
  bool abandoned_ = false;
  Ready waiting_;
};

}  // namespace garm_edge::net
