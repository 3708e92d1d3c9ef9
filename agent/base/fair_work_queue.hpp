#pragma once

#include <cstddef>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>

#include <asio/thread_pool.hpp>

namespace garm_edge::agent {

/// Worker threads that no key (a client certificate) can occupy alone: a key has at
/// most `per_key` jobs running; its further jobs wait in its own queue, in order, while other
/// keys' jobs take the free workers. One controller's commands stuck on libvirt (graceful stops
/// of guests that ignore ACPI, a slow storage pool) leave the other controllers workers.
class FairWorkQueue {
 public:
  /// `per_key` 0: half the workers (at least one).
  explicit FairWorkQueue(std::size_t workers, std::size_t per_key = 0);
  ~FairWorkQueue() { join(); }
  FairWorkQueue(const FairWorkQueue&) = delete;
  FairWorkQueue& operator=(const FairWorkQueue&) = delete;

  void post(const std::string& key, std::function<void()> job);
  /// Waits for every job posted so far, queued ones included.
  void join();
  std::size_t per_key() const { return per_key_; }

 private:
  struct Queue {
    std::size_t running = 0;
    std::deque<std::function<void()>> waiting;
  };
  void start(const std::string& key, std::function<void()> job);
  void finished(const std::string& key);

  std::size_t per_key_;
  asio::thread_pool pool_;
  std::mutex mutex_;
  std::map<std::string, Queue> queues_;
};

}  // namespace garm_edge::agent
