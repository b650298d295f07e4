#include "report_queue.h"

#include <algorithm>

namespace fg {

bool Holdable(const MonitorItem& item) {
  const auto* link = std::get_if<LinkItem>(&item);
  return link != nullptr && link->correction && !link->correction->error &&
         link->correction->echoed && !link->disarmed;
}

ReportQueue::Decision ReportQueue::Read(std::vector<MonitorItem> items, int64_t arrivalNs,
                                        int64_t now, bool failed) {
  const bool due = !held_.empty() && now >= heldDueNs_;
  if (!failed && !due && (items.empty() || Hold(items, now))) {
    return {false, false, held_.empty() ? 0 : heldDueNs_};
  }
  // The loop queries the mirror as of what it is handed: the reader waits for
  // it, unless it hands over corrections alone (the mirror back where it was).
  const bool news = failed || !std::all_of(items.begin(), items.end(), Holdable);
  ReadyHeld();
  if (!items.empty()) {
    readyArrivalNs_ = arrivalNs;
    for (MonitorItem& item : items) ready_.push_back(std::move(item));
  }
  lastReportNs_ = now;
  // Bounded: a loop that does not take what it is handed stops the reader.
  const bool pause = !readyPauses_ && (news || ready_.size() >= MonitorCore::kItemsPerBatch);
  readyPauses_ = readyPauses_ || pause;
  return {true, pause, 0};
}

bool ReportQueue::Hold(std::vector<MonitorItem>& items, int64_t now) {
  // Bounded: held corrections never grow past what one read hands over.
  if (intervalNs_ == 0 || held_.size() + items.size() > MonitorCore::kItemsPerBatch) return false;
  if (!std::all_of(items.begin(), items.end(), Holdable)) return false;
  if (held_.empty()) {
    heldDueNs_ = lastReportNs_ + intervalNs_;
    if (lastReportNs_ == 0 || now >= heldDueNs_) return false;  // the leading edge
  }
  stats_.heldCorrections += items.size();
  for (MonitorItem& item : items) held_.push_back(std::move(item));
  items.clear();
  return true;
}

void ReportQueue::ReadyHeld() {
  if (held_.empty()) return;
  if (ready_.empty()) readyArrivalNs_ = std::get<LinkItem>(held_.front()).arrivalNs;
  for (MonitorItem& item : held_) ready_.push_back(std::move(item));
  held_.clear();
}

ReportQueue::Taken ReportQueue::Take(bool flush, int64_t now) {
  if (flush && !held_.empty()) {
    ReadyHeld();
    lastReportNs_ = now;
  }
  Taken taken;
  taken.items.swap(ready_);
  taken.arrivalNs = readyArrivalNs_;
  taken.paused = readyPauses_;
  readyPauses_ = false;
  if (!taken.items.empty()) ++stats_.reports;
  return taken;
}

std::vector<const MonitorItem*> ReportQueue::Queued() const {
  std::vector<const MonitorItem*> queued;
  queued.reserve(ready_.size() + held_.size());
  for (const MonitorItem& item : ready_) queued.push_back(&item);
  for (const MonitorItem& item : held_) queued.push_back(&item);
  return queued;
}

void ReportQueue::Clear() {
  held_.clear();
  ready_.clear();
}

}  // namespace fg
