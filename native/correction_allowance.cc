#include "correction_allowance.h"

#include <algorithm>
#include <utility>

namespace fg {

CorrectionAllowance::CorrectionAllowance(int limit, int64_t windowNs, std::deque<int64_t> recentNs)
    : limit_(limit), windowNs_(windowNs), recentNs_(std::move(recentNs)) {
  std::sort(recentNs_.begin(), recentNs_.end());
}

bool CorrectionAllowance::Take(int64_t nowNs) {
  // As FightTracker: a rewrite counts while now - at < window.
  while (!recentNs_.empty() && nowNs - recentNs_.front() >= windowNs_) recentNs_.pop_front();
  if (static_cast<int64_t>(recentNs_.size()) >= limit_) return false;
  recentNs_.push_back(nowNs);
  return true;
}

}  // namespace fg
