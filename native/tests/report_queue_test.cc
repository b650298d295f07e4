// Unit tests for native/report_queue.cc: when the reader hands what it read to
// the loop, what it holds back, and when it waits for the loop.
#include "report_queue.h"

#include <vector>

#include "test_harness.h"

namespace {

using fg::Correction;
using fg::LinkItem;
using fg::MonitorItem;
using fg::ReportQueue;
using fg::WarningItem;

constexpr int64_t kMs = 1'000'000;

// A correction made for an armed device that stays armed, its echo read with it.
MonitorItem Corrected(int64_t arrivalNs) {
  Correction correction;
  correction.echoed = true;
  return LinkItem{4, std::nullopt, correction, false, arrivalNs};
}

std::vector<MonitorItem> One(MonitorItem item) {
  std::vector<MonitorItem> items;
  items.push_back(std::move(item));
  return items;
}

TEST_CASE("report queue: without an interval every read is handed over; only news pauses") {
  ReportQueue queue(0);
  ReportQueue::Decision corrected = queue.Read(One(Corrected(1 * kMs)), 1 * kMs, 2 * kMs, false);
  EXPECT_TRUE(corrected.handOver && !corrected.pause);
  ReportQueue::Decision news =
      queue.Read(One(WarningItem{"EBADMSG", "x"}), 3 * kMs, 3 * kMs, false);
  EXPECT_TRUE(news.handOver && news.pause);
  ReportQueue::Taken taken = queue.Take(false, 4 * kMs);
  EXPECT_EQ(taken.items.size(), size_t{2});
  EXPECT_TRUE(taken.paused);
  EXPECT_EQ(taken.arrivalNs, 3 * kMs);
  EXPECT_EQ(queue.stats().reports, uint64_t{1});
  EXPECT_TRUE(queue.Read({}, 0, 5 * kMs, false).handOver == false);
}

TEST_CASE(
    "report queue: the first correction after a quiet interval goes at once, the next are held "
    "until due") {
  ReportQueue queue(50 * kMs);
  EXPECT_TRUE(queue.Read(One(Corrected(10 * kMs)), 10 * kMs, 10 * kMs, false).handOver);
  queue.Take(false, 11 * kMs);
  ReportQueue::Decision second = queue.Read(One(Corrected(20 * kMs)), 20 * kMs, 20 * kMs, false);
  EXPECT_TRUE(!second.handOver);
  EXPECT_EQ(second.dueNs, 60 * kMs);  // the last report (10 ms) plus the interval
  EXPECT_TRUE(!queue.Read(One(Corrected(30 * kMs)), 30 * kMs, 30 * kMs, false).handOver);
  EXPECT_EQ(queue.held(), size_t{2});
  EXPECT_TRUE(!queue.Read({}, 0, 59 * kMs, false).handOver);
  ReportQueue::Decision due = queue.Read({}, 0, 60 * kMs, false);
  EXPECT_TRUE(due.handOver && !due.pause);
  ReportQueue::Taken taken = queue.Take(false, 61 * kMs);
  EXPECT_EQ(taken.items.size(), size_t{2});
  EXPECT_EQ(taken.arrivalNs, 20 * kMs);  // each keeps its own; the batch's is the first's
  EXPECT_EQ(queue.stats().heldCorrections, uint64_t{2});
  // Quiet for an interval since that report: the next goes at once again.
  EXPECT_TRUE(queue.Read(One(Corrected(200 * kMs)), 200 * kMs, 200 * kMs, false).handOver);
}

TEST_CASE("report queue: news takes the held corrections along, first, and the reader waits") {
  ReportQueue queue(50 * kMs);
  queue.Read(One(Corrected(10 * kMs)), 10 * kMs, 10 * kMs, false);
  queue.Take(false, 10 * kMs);
  queue.Read(One(Corrected(20 * kMs)), 20 * kMs, 20 * kMs, false);
  ReportQueue::Decision news =
      queue.Read(One(WarningItem{"EAGAIN", "y"}), 25 * kMs, 25 * kMs, false);
  EXPECT_TRUE(news.handOver && news.pause);
  ReportQueue::Taken taken = queue.Take(false, 26 * kMs);
  EXPECT_EQ(taken.items.size(), size_t{2});
  EXPECT_TRUE(std::holds_alternative<LinkItem>(taken.items[0]));
  EXPECT_TRUE(std::holds_alternative<WarningItem>(taken.items[1]));
  EXPECT_EQ(taken.arrivalNs, 25 * kMs);
}

TEST_CASE("report queue: a flush takes the held ones; a failed read is handed over and pauses") {
  ReportQueue queue(50 * kMs);
  queue.Read(One(Corrected(10 * kMs)), 10 * kMs, 10 * kMs, false);
  queue.Take(false, 10 * kMs);
  queue.Read(One(Corrected(20 * kMs)), 20 * kMs, 20 * kMs, false);
  EXPECT_EQ(queue.Take(false, 21 * kMs).items.size(), size_t{0});
  EXPECT_EQ(queue.Take(true, 22 * kMs).items.size(), size_t{1});
  ReportQueue::Decision failed = queue.Read({}, 0, 30 * kMs, true);
  EXPECT_TRUE(failed.handOver && failed.pause);
}

TEST_CASE("report queue: the reader pauses once for a backlog the loop has not taken") {
  ReportQueue queue(0);
  size_t pauses = 0;
  for (size_t i = 0; i < fg::MonitorCore::kItemsPerBatch + 10; ++i) {
    if (queue.Read(One(Corrected(1)), 1, 2, false).pause) ++pauses;
  }
  EXPECT_EQ(pauses, size_t{1});
  ReportQueue::Taken taken = queue.Take(false, 3);
  EXPECT_TRUE(taken.paused);
  EXPECT_EQ(taken.items.size(), fg::MonitorCore::kItemsPerBatch + 10);
  EXPECT_TRUE(!queue.Take(false, 4).paused);
}

}  // namespace
