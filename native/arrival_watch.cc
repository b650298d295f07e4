#include "arrival_watch.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>

namespace fg {
Result<std::unique_ptr<ArrivalWatch>> ArrivalWatch::Start(int fd) {
  const int wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake < 0) return SysError(errno, "eventfd");
  std::unique_ptr<ArrivalWatch> watch(new ArrivalWatch(fd, wake));
  watch->thread_ = std::thread([raw = watch.get()] { raw->Run(); });
  return watch;
}

ArrivalWatch::~ArrivalWatch() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  changed_.notify_one();
  Wake();
  if (thread_.joinable()) thread_.join();
  close(wake_);
}

void ArrivalWatch::Wake() {
  const uint64_t one = 1;
  // EAGAIN: the counter is already set, which wakes the poll just as well.
  [[maybe_unused]] const ssize_t written = write(wake_, &one, sizeof(one));
}

void ArrivalWatch::Arm() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    armed_ = true;
    arrival_ = 0;
  }
  changed_.notify_one();
}

int64_t ArrivalWatch::Take() {
  std::lock_guard<std::mutex> lock(mutex_);
  const int64_t arrival = arrival_;
  arrival_ = 0;
  return arrival;
}

void ArrivalWatch::Run() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [this] { return armed_ || stop_; });
      if (stop_) return;
    }
    pollfd fds[2] = {{fd_, POLLIN, 0}, {wake_, POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;  // nothing sensible to watch: latencies fall back to the read time
    }
    if (fds[1].revents & POLLIN) {
      uint64_t count = 0;
      [[maybe_unused]] const ssize_t read_ = read(wake_, &count, sizeof(count));
      continue;
    }
    if (fds[0].revents != 0) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (armed_) {
        arrival_ = SteadyNowNs();
        armed_ = false;  // until the next read: the socket stays readable until then
      }
    }
  }
}

}  // namespace fg
