#include "read_thread.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace fg {

Result<std::unique_ptr<ReadThread>> ReadThread::Start(int fd, Turn turn) {
  const int wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake < 0) return SysError(errno, "eventfd");
  std::unique_ptr<ReadThread> reader(new ReadThread(fd, wake, std::move(turn)));
  reader->thread_ = std::thread([raw = reader.get()] { raw->Run(); });
  return reader;
}

ReadThread::~ReadThread() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  Wake();
  if (thread_.joinable()) thread_.join();
  close(wake_);
}

void ReadThread::Wake() {
  const uint64_t one = 1;
  // EAGAIN: the counter is already set, which wakes the thread just as well.
  [[maybe_unused]] const ssize_t written = write(wake_, &one, sizeof(one));
}

void ReadThread::Kick() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    kicked_ = true;
  }
  Wake();
}

void ReadThread::Suspend() {
  std::unique_lock<std::mutex> lock(mutex_);
  ++pauses_;
  turnEnded_.wait(lock, [this] { return !inTurn_; });
}

void ReadThread::Resume() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    // May come before the turn that paused has ended: the count then dips below 0.
    --pauses_;
  }
  Wake();
}

void ReadThread::Run() {
  // As top -H and perf show it (prctl: pthread_setname_np would need glibc 2.34).
  prctl(PR_SET_NAME, "fg-reader", 0, 0, 0);
  int64_t arrival = 0;   // the socket was seen readable then, and not read since
  int64_t deadline = 0;  // the last turn's
  for (;;) {
    bool paused = false;
    bool kickPending = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (stop_) return;
      paused = pauses_ > 0;
      kickPending = kicked_;
    }
    // The socket is polled until it is seen readable, paused or not; once
    // seen, only a turn can make it unreadable, so until then it is left out
    // (level-triggered, it would wake the thread again and again).
    pollfd fds[2] = {{wake_, POLLIN, 0}, {fd_, POLLIN, 0}};
    const nfds_t count = arrival == 0 ? 2 : 1;
    int timeoutMs = -1;
    if (!paused && kickPending) {
      timeoutMs = 0;
    } else if (!paused && deadline != 0) {
      const int64_t left = deadline - SteadyNowNs();
      timeoutMs = left <= 0 ? 0 : static_cast<int>(std::min<int64_t>(left / 1'000'000 + 1, 60'000));
    }
    const int ready = poll(fds, count, timeoutMs);
    if (ready < 0) {
      // ENOMEM passes; the reader must not end on it (nothing else would read).
      if (errno != EINTR) usleep(10'000);
      continue;
    }
    const int64_t now = SteadyNowNs();
    if ((fds[0].revents & POLLIN) != 0) {
      uint64_t counter = 0;
      [[maybe_unused]] const ssize_t drained = read(wake_, &counter, sizeof(counter));
    }
    // An error pending on the socket (ENOBUFS) polls as POLLERR: the turn's read collects it.
    if (count == 2 && fds[1].revents != 0) arrival = now;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (stop_) return;
      if (pauses_ > 0) continue;
      if (!kicked_ && arrival == 0 && (deadline == 0 || now < deadline)) continue;
      kicked_ = false;
      inTurn_ = true;
    }
    const Next next = turn_(arrival);
    arrival = 0;
    deadline = next.deadlineNs;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      inTurn_ = false;
      if (next.pause) ++pauses_;
      if (next.stop) stop_ = true;
    }
    turnEnded_.notify_all();
  }
}

}  // namespace fg
