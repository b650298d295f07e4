// Unit tests for native/read_thread.cc, on a pipe standing in for the socket:
// turns on readability, kicks and deadlines; no turn while paused, yet the
// arrival noted while paused; Suspend waits for a turn in progress; a turn
// that stops ends the thread.
#include "read_thread.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <vector>

#include "test_harness.h"

namespace {

using fg::ReadThread;
using fg::SteadyNowNs;

constexpr int64_t kMs = 1'000'000;

// The pipe and what the turns saw; each turn drains the pipe and answers with
// `next` (set by the test).
struct Bed {
  int fds[2] = {-1, -1};
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<int64_t> arrivals;  // one per turn
  std::vector<int64_t> turnTimes;
  size_t turnsStarted = 0;
  ReadThread::Next next;
  std::atomic<int64_t> turnSleepNs{0};

  Bed() { EXPECT_EQ(pipe2(fds, O_NONBLOCK | O_CLOEXEC), 0); }
  ~Bed() {
    close(fds[0]);
    close(fds[1]);
  }
  ReadThread::Next Turn(int64_t arrival) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      ++turnsStarted;
      changed.notify_all();
    }
    if (turnSleepNs > 0) {
      const int64_t until = SteadyNowNs() + turnSleepNs;
      while (SteadyNowNs() < until) usleep(1000);
    }
    char buffer[64];
    while (read(fds[0], buffer, sizeof(buffer)) > 0) {
    }
    std::lock_guard<std::mutex> lock(mutex);
    arrivals.push_back(arrival);
    turnTimes.push_back(SteadyNowNs());
    changed.notify_all();
    return next;
  }
  void Write() { EXPECT_EQ(write(fds[1], "x", 1), 1); }
  // Waits (at most 2 s) for `count` turns in all; whether they came.
  bool WaitTurns(size_t count) {
    std::unique_lock<std::mutex> lock(mutex);
    return changed.wait_for(lock, std::chrono::seconds(2),
                            [&] { return arrivals.size() >= count; });
  }
  // Waits (at most 2 s) for `count` turns begun in all; whether they began.
  bool WaitTurnsStarted(size_t count) {
    std::unique_lock<std::mutex> lock(mutex);
    return changed.wait_for(lock, std::chrono::seconds(2), [&] { return turnsStarted >= count; });
  }
  size_t Turns() {
    std::lock_guard<std::mutex> lock(mutex);
    return arrivals.size();
  }
  // Whether `ms` pass with no turn beyond the `count` so far.
  bool QuietFor(int ms, size_t count) {
    usleep(static_cast<useconds_t>(ms) * 1000);
    return Turns() == count;
  }
};

std::unique_ptr<ReadThread> StartOn(Bed& bed) {
  auto reader =
      ReadThread::Start(bed.fds[0], [&bed](int64_t arrival) { return bed.Turn(arrival); });
  EXPECT_TRUE(reader.ok());
  return std::move(reader.value());
}

TEST_CASE("read thread: a first turn at once, then one per readable socket, stamped") {
  Bed bed;
  auto reader = StartOn(bed);
  EXPECT_TRUE(bed.WaitTurns(1));
  EXPECT_EQ(bed.arrivals[0], 0);  // the start's kick
  for (size_t i = 0; i < 5; ++i) {
    const int64_t before = SteadyNowNs();
    bed.Write();
    EXPECT_TRUE(bed.WaitTurns(i + 2));
    std::lock_guard<std::mutex> lock(bed.mutex);
    EXPECT_TRUE(bed.arrivals[i + 1] >= before);
    EXPECT_TRUE(bed.arrivals[i + 1] <= bed.turnTimes[i + 1]);
  }
  EXPECT_TRUE(bed.QuietFor(20, 6));  // nothing readable, nothing due: no turn
}

TEST_CASE("read thread: no turn while paused; the arrival is noted while paused") {
  Bed bed;
  bed.next.pause = true;
  auto reader = StartOn(bed);
  EXPECT_TRUE(bed.WaitTurns(1));
  const int64_t before = SteadyNowNs();
  bed.Write();
  EXPECT_TRUE(bed.QuietFor(30, 1));
  const int64_t resumed = SteadyNowNs();
  reader->Resume();
  EXPECT_TRUE(bed.WaitTurns(2));
  std::lock_guard<std::mutex> lock(bed.mutex);
  EXPECT_TRUE(bed.arrivals[1] >= before);
  EXPECT_TRUE(bed.arrivals[1] < resumed);  // when it arrived, not when the pause ended
}

TEST_CASE("read thread: a Resume that comes before its pausing turn has returned ends the pause") {
  Bed bed;
  bed.next.pause = true;
  ReadThread* self = nullptr;
  std::mutex selfMutex;
  auto reader = ReadThread::Start(bed.fds[0], [&](int64_t arrival) {
    ReadThread::Next next = bed.Turn(arrival);
    std::lock_guard<std::mutex> lock(selfMutex);
    if (self) self->Resume();  // as the loop may, between the hand-over and the turn's return
    return next;
  });
  EXPECT_TRUE(reader.ok());
  EXPECT_TRUE(bed.WaitTurns(1));
  {
    std::lock_guard<std::mutex> lock(selfMutex);
    self = reader.value().get();
  }
  reader.value()->Resume();  // the first turn's pause
  for (size_t i = 0; i < 3; ++i) {
    bed.Write();
    EXPECT_TRUE(bed.WaitTurns(i + 2));
  }
}

TEST_CASE("read thread: a deadline runs a turn with nothing readable; a kick runs one") {
  Bed bed;
  const int64_t started = SteadyNowNs();
  {
    std::lock_guard<std::mutex> lock(bed.mutex);
    bed.next.deadlineNs = started + 30 * kMs;
  }
  auto reader = StartOn(bed);
  EXPECT_TRUE(bed.WaitTurns(1));
  {
    std::lock_guard<std::mutex> lock(bed.mutex);
    bed.next.deadlineNs = 0;
  }
  EXPECT_TRUE(bed.WaitTurns(2));
  {
    std::lock_guard<std::mutex> lock(bed.mutex);
    EXPECT_EQ(bed.arrivals[1], 0);
    EXPECT_TRUE(bed.turnTimes[1] >= started + 30 * kMs);
  }
  EXPECT_TRUE(bed.QuietFor(20, 2));
  reader->Kick();
  EXPECT_TRUE(bed.WaitTurns(3));
}

TEST_CASE("read thread: Suspend waits for the turn under way, and holds turns until Resume") {
  Bed bed;
  auto reader = StartOn(bed);
  EXPECT_TRUE(bed.WaitTurns(1));
  bed.turnSleepNs = 40 * kMs;  // read by the thread only inside the next turn
  bed.Write();
  EXPECT_TRUE(bed.WaitTurnsStarted(2));  // the turn is under way
  reader->Suspend();
  EXPECT_EQ(bed.Turns(), size_t{2});  // it ended before Suspend returned
  bed.turnSleepNs = 0;
  bed.Write();
  EXPECT_TRUE(bed.QuietFor(30, 2));
  reader->Resume();
  EXPECT_TRUE(bed.WaitTurns(3));
}

TEST_CASE("read thread: a turn that stops ends it; destroying it joins") {
  Bed bed;
  bed.next.stop = true;
  auto reader = StartOn(bed);
  EXPECT_TRUE(bed.WaitTurns(1));
  bed.Write();
  reader->Kick();
  EXPECT_TRUE(bed.QuietFor(30, 1));
  reader.reset();
}

}  // namespace
