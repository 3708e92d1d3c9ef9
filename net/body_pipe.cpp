#include "net/body_pipe.hpp"

#include <utility>

namespace garm_edge::net {

bool BodyPipe::write(std::string_view data, std::chrono::steady_clock::time_point deadline) {
  Ready ready;
  Piece piece;
  {
    std::unique_lock lock(mutex_);
    const bool room = space_.wait_until(lock, deadline,
                                        [&] { return abandoned_ || buffered_.size() < capacity_; });
    if (!room || abandoned_ || finished_) {
      return false;
    }
    buffered_.append(data);
    if (!waiting_) {
      return true;
    }
    ready = std::exchange(waiting_, nullptr);
    piece = take();
  }
  ready(std::move(piece));
  return true;
}

void BodyPipe::finish(bool complete) {
  Ready ready;
  Piece piece;
  {
    std::lock_guard lock(mutex_);
    if (finished_) {
      return;
    }
    finished_ = true;
    complete_ = complete;
    if (!waiting_) {
      return;
    }
    ready = std::exchange(waiting_, nullptr);
    piece = take();
  }
  ready(std::move(piece));
}

void BodyPipe::read(Ready ready) {
  Piece piece;
  {
    std::lock_guard lock(mutex_);
    if (buffered_.empty() && !finished_) {
      waiting_ = std::move(ready);
      return;
    }
    piece = take();
  }
  ready(std::move(piece));
}

void BodyPipe::abandon() {
  Ready dropped;  // may hold the last reference to the reader: destroyed after unlocking
  {
    std::lock_guard lock(mutex_);
    abandoned_ = true;
    dropped = std::exchange(waiting_, nullptr);
  }
  space_.notify_all();
}

BodyPipe::Piece BodyPipe::take() {
  Piece piece{.data = std::exchange(buffered_, {}), .end = finished_, .complete = complete_};
  space_.notify_all();
  return piece;
}

}  // namespace garm_edge::net
