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
  socket.data.fd = fd;
  epoll_event stop{};
  stop.events = EPOLLIN;
  stop.data.fd = wake;
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

void ArrivalWatch::Arm() {
  arrival_.store(0);
  epoll_event socket{};
  socket.events = EPOLLIN | EPOLLONESHOT;
  socket.data.fd = fd_;
  // Data already waiting wakes the thread at once. A failure leaves the
  // socket disabled: latencies fall back to the read time.
  [[maybe_unused]] const int modified = epoll_ctl(epoll_, EPOLL_CTL_MOD, fd_, &socket);
}

void ArrivalWatch::Pause() {
  epoll_event socket{};
  socket.events = EPOLLONESHOT;  // no events until enabled again
  socket.data.fd = fd_;
  [[maybe_unused]] const int modified = epoll_ctl(epoll_, EPOLL_CTL_MOD, fd_, &socket);
}

void ArrivalWatch::Resume() {
  // Unlike Arm, a stamp of data still unread stays; data waiting unstamped is
  // stamped at once (it arrived while the loop was busy before this).
  epoll_event socket{};
  socket.events = EPOLLIN | EPOLLONESHOT;
  socket.data.fd = fd_;
  [[maybe_unused]] const int modified = epoll_ctl(epoll_, EPOLL_CTL_MOD, fd_, &socket);
}

int64_t ArrivalWatch::Take() { return arrival_.exchange(0); }

void ArrivalWatch::Run() {
  while (!stop_.load()) {
    epoll_event events[2];
    const int ready = epoll_wait(epoll_, events, 2, -1);
    if (ready < 0) {
      if (errno == EINTR) continue;
      return;  // nothing sensible to watch: latencies fall back to the read time
    }
    for (int i = 0; i < ready; ++i) {
      // One stamp per arming: the socket is disabled again until the next Arm().
      if (events[i].data.fd == fd_) arrival_.store(SteadyNowNs());
    }
  }
}

}  // namespace fg
