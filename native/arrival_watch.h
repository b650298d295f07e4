// When the monitor's socket became readable, noted on a thread of its own:
// netlink carries no receive timestamps, and the event loop may be busy (a
// long JSON line, a slow listener) when the kernel's notification arrives. A
// correction's latency counts from this moment, so a stalled loop shows in
// the figures instead of hiding in them. The thread only polls; it never
// reads the socket. No Node dependency.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>

#include "result.h"

namespace fg {

// steady_clock (CLOCK_MONOTONIC, as process.hrtime) in nanoseconds.
inline int64_t SteadyNowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

class ArrivalWatch {
 public:
  // Watches `fd` (which stays owned by the caller) until destroyed.
  static Result<std::unique_ptr<ArrivalWatch>> Start(int fd);
  ~ArrivalWatch();
  ArrivalWatch(const ArrivalWatch&) = delete;
  ArrivalWatch& operator=(const ArrivalWatch&) = delete;

  // After the socket was read: note the next moment it is readable.
  void Arm();
  // While the owner's loop sleeps in its own poll, an arrival wakes the loop
  // at once and needs no stamp: Pause before it sleeps (the thread then stays
  // asleep too), Resume once it is busy again. A stamp already taken is kept.
  void Pause();
  void Resume();
  // steady_clock nanoseconds at which the unread data arrived, or 0 when
  // none was noted since the last Arm; clears it.
  int64_t Take();

 private:
  ArrivalWatch(int fd, int epoll, int wake) : fd_(fd), epoll_(epoll), wake_(wake) {}
  void Run();

  void Enable(bool enabled);

  const int fd_;
  // The socket registered EPOLLONESHOT, its event data the arming's
  // generation (0 is the stop eventfd): epoll reports a wake with the data of
  // the enabling in force when it delivers it, and only while the socket is
  // still readable, so a stamp names the arming it belongs to. A wake of an
  // earlier arming, stamped after the data it saw was read, is never taken
  // for the next data.
  const int epoll_;
  const int wake_;  // eventfd: stop
  std::atomic<bool> stop_{false};
  uint64_t generation_ = 1;  // the owner's thread only
  std::mutex mutex_;         // guards the stamp and its generation
  int64_t arrival_ = 0;
  uint64_t arrivalGeneration_ = 0;
  std::thread thread_;
};

}  // namespace fg
