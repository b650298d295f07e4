#include "arrival_watch.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>

namespace fg {
Result<std::unique_ptr<ArrivalWatch>> ArrivalWatch::Start(int fd) {
  const int epoll = epoll_create1(EPOLL_CLOEXEC);
  if (epoll < 0) return SysError(errno, "epoll_create1");
  const int wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake < 0) {
    const int error = errno;
    close(epoll);
    return SysError(error, "eventfd");
  }
  // The socket starts disabled (no events until the first Arm); the eventfd
  // always wakes the thread.
  epoll_event socket{};
  socket.events = EPOLLONESHOT;
  socket.data.u64 = 1;  // the first arming's generation (see generation_)
  epoll_event stop{};
  stop.events = EPOLLIN;
  stop.data.u64 = 0;
  if (epoll_ctl(epoll, EPOLL_CTL_ADD, fd, &socket) != 0 ||
      epoll_ctl(epoll, EPOLL_CTL_ADD, wake, &stop) != 0) {
    const int error = errno;
    close(wake);
    close(epoll);
    return SysError(error, "epoll_ctl");
  }
  std::unique_ptr<ArrivalWatch> watch(new ArrivalWatch(fd, epoll, wake));
  watch->thread_ = std::thread([raw = watch.get()] { raw->Run(); });
  return watch;
}

ArrivalWatch::~ArrivalWatch() {
  stop_.store(true);
  const uint64_t one = 1;
  // EAGAIN: the counter is already set, which wakes the thread just as well.
  [[maybe_unused]] const ssize_t written = write(wake_, &one, sizeof(one));
  if (thread_.joinable()) thread_.join();
  close(wake_);
  close(epoll_);
}

void ArrivalWatch::Enable(bool enabled) {
  epoll_event socket{};
  socket.events = enabled ? EPOLLIN | EPOLLONESHOT : EPOLLONESHOT;
  socket.data.u64 = generation_;
  // Data already waiting wakes the thread at once. A failure leaves the
  // socket disabled: latencies fall back to the read time.
  [[maybe_unused]] const int modified = epoll_ctl(epoll_, EPOLL_CTL_MOD, fd_, &socket);
}

void ArrivalWatch::Arm() {
  ++generation_;
  Enable(true);
}

void ArrivalWatch::Pause() { Enable(false); }

// Unlike Arm, a stamp of data still unread stays; data waiting unstamped is
// stamped at once (it arrived while the loop was busy before this).
void ArrivalWatch::Resume() { Enable(true); }

int64_t ArrivalWatch::Take() {
  std::lock_guard<std::mutex> lock(mutex_);
  const int64_t arrival = arrivalGeneration_ == generation_ ? arrival_ : 0;
  arrival_ = 0;
  arrivalGeneration_ = 0;
  return arrival;
}

void ArrivalWatch::Run() {
  while (!stop_.load()) {
    epoll_event events[2];
    const int ready = epoll_wait(epoll_, events, 2, -1);
    if (ready < 0) {
      if (errno == EINTR) continue;
      return;  // nothing sensible to watch: latencies fall back to the read time
    }
    for (int i = 0; i < ready; ++i) {
      const uint64_t generation = events[i].data.u64;
      if (generation == 0) continue;  // the stop eventfd
      // The first stamp of an arming stands (a Resume re-enables the same one).
      const int64_t now = SteadyNowNs();
      std::lock_guard<std::mutex> lock(mutex_);
      if (arrivalGeneration_ != generation) {
        arrival_ = now;
        arrivalGeneration_ = generation;
      }
    }
  }
}

}  // namespace fg
