#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <utility>

namespace garm_edge::agent {

/// Caps how many creates run at once; the rest wait their turn in arrival order instead of
/// failing (garm sends creates in bursts and treats a failure as a reason to retry).
class CreateGate {
 public:
  explicit CreateGate(std::size_t capacity) : capacity_(capacity) {}

  class Slot {
   public:
    explicit Slot(CreateGate& gate) : gate_(&gate) {}
    ~Slot() {
      if (gate_ != nullptr) {
        gate_->release();
      }
    }
    Slot(Slot&& other) noexcept : gate_(std::exchange(other.gate_, nullptr)) {}
    Slot(const Slot&) = delete;
    Slot& operator=(const Slot&) = delete;
    Slot& operator=(Slot&&) = delete;

   private:
    CreateGate* gate_;
  };

  Slot acquire() {
    std::unique_lock lock(mutex_);
    const std::uint64_t ticket = next_ticket_++;
    turn_.wait(lock, [&] { return ticket == serving_ && running_ < capacity_; });
    ++serving_;
    ++running_;
    turn_.notify_all();  // the next ticket may also fit
    return Slot(*this);
  }

  std::size_t running() const {
    std::lock_guard lock(mutex_);
    return running_;
  }

 private:
  void release() {
    {
      std::lock_guard lock(mutex_);
      --running_;
    }
    turn_.notify_all();
  }

  mutable std::mutex mutex_;
  std::condition_variable turn_;
  std::size_t capacity_;
  std::size_t running_ = 0;
  std::uint64_t next_ticket_ = 0;
  std::uint64_t serving_ = 0;
};

}  // namespace garm_edge::agent
