// What the monitor's reader hands its owner's loop, and when: the report
// holding and the hand-over between the reader thread and the loop, as pure
// rules over items and times (no lock, no Node; the owner guards it, see
// guarded.h). Corrections already made (Holdable) are held: the first after a
// quiet report interval goes at once, the ones after it, while they keep
// coming, together when the interval is up; a batch with anything else takes
// the held ones along at once. Each held correction carries its own arrival.
#pragma once

#include <cstdint>
#include <vector>

#include "monitor_core.h"

namespace fg {

// An item the loop needs nothing from in a hurry: a correction made for an
// armed device that stays armed, without error, whose own notification was
// read with it (the mirror is back where it was).
bool Holdable(const MonitorItem& item);

struct ReportStats {
  uint64_t reports = 0;          // batches handed to the loop
  uint64_t heldCorrections = 0;  // corrections whose report waited for a later batch
};

class ReportQueue {
 public:
  // `intervalNs` 0: every batch is handed over at once.
  explicit ReportQueue(int64_t intervalNs = 0) : intervalNs_(intervalNs) {}

  // What the reader does with the items of a read (at `now`): keep them held
  // (false: nothing to hand over now), or hand them over with the held ones.
  struct Decision {
    bool handOver = false;
    bool pause = false;  // the reader waits until the loop has taken them
    int64_t dueNs = 0;   // a turn then, for the held ones (0: none held)
  };
  // `failed`: the read failed for good (its FatalItem is in `items`).
  Decision Read(std::vector<MonitorItem> items, int64_t arrivalNs, int64_t now, bool failed);

  // What the loop takes: everything handed over, and with `flush` the held
  // ones too (at `now`); whether the reader was paused for it.
  struct Taken {
    std::vector<MonitorItem> items;
    int64_t arrivalNs = 0;  // of the batch, or of the first held correction
    bool paused = false;
  };
  Taken Take(bool flush, int64_t now);

  void Clear();
  // The items read and not yet taken, in the order Take delivers them.
  std::vector<const MonitorItem*> Queued() const;
  const ReportStats& stats() const { return stats_; }
  size_t held() const { return held_.size(); }

 private:
  bool Hold(std::vector<MonitorItem>& items, int64_t now);
  void ReadyHeld();

  int64_t intervalNs_;
  std::vector<MonitorItem> held_;  // corrections waiting for the next report
  int64_t heldDueNs_ = 0;
  std::vector<MonitorItem> ready_;  // handed over, not yet taken
  int64_t readyArrivalNs_ = 0;
  bool readyPauses_ = false;  // the reader waits for ready_ to be taken
  int64_t lastReportNs_ = 0;
  ReportStats stats_;
};

}  // namespace fg
