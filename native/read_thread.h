// A thread of its own that reads a socket for its owner, so that answering the
// kernel never waits for the owner's event loop: each time the socket is
// readable (or the owner kicks it, or a deadline it set passes) it runs the
// owner's turn. After a turn that handed something over, it pauses until the
// owner resumes it, so that the owner reads a state that stands still while it
// looks at what was handed over. While paused it still notes when the socket
// became readable: netlink carries no receive timestamps, and a latency counts
// from that moment. No Node dependency.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "result.h"
#include "steady_clock.h"

namespace fg {

class ReadThread {
 public:
  // What a turn asks for next.
  struct Next {
    int64_t deadlineNs = 0;  // steady_clock: run a turn then, readable or not (0: none)
    bool pause = false;      // something was handed over: no turn until Resume()
    bool stop = false;       // nothing more to read
  };
  // Runs on the thread. `arrivalNs`: when the socket was first seen readable
  // since the last turn (steady_clock), 0 when the turn is for a kick or a deadline.
  using Turn = std::function<Next(int64_t arrivalNs)>;

  // Starts the thread on `fd` (which stays owned by the caller and must
  // outlive it). The first turn runs at once.
  static Result<std::unique_ptr<ReadThread>> Start(int fd, Turn turn);
  // Stops the thread (after the turn it is in, if any) and joins it.
  ~ReadThread();
  ReadThread(const ReadThread&) = delete;
  ReadThread& operator=(const ReadThread&) = delete;

  // A turn soon, readable or not (the owner has work for it).
  void Kick();
  // Pauses the thread for the caller, waiting for the turn it is in, if any,
  // to end: no turn runs until the matching Resume(). Never call it from a turn.
  void Suspend();
  // Ends one pause: a turn's (even before that turn has returned) or a Suspend()'s.
  void Resume();

 private:
  ReadThread(int fd, int wake, Turn turn) : fd_(fd), wake_(wake), turn_(std::move(turn)) {}
  void Run();
  void Wake();

  const int fd_;
  const int wake_;  // eventfd: the state below changed
  const Turn turn_;
  std::mutex mutex_;  // guards what follows
  std::condition_variable turnEnded_;
  // Pauses (turns that handed over, Suspend()s) less Resume()s: paused while above 0.
  int pauses_ = 0;
  bool inTurn_ = false;
  bool kicked_ = true;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace fg
