// How many rewrites of a device the native layer answers without asking JS:
// at most `limit` within any `windowNs`, counting the rewrites JS had already
// recorded when it armed. This is the fight policy's "corrected at once" rule
// (FightTracker.correctionsNow in lib/guard/fight.ts) carried out where the
// rewrites are read, so that a storm of rewrites the policy allows is answered
// without a JS round per rewrite; everything past it is JS's to decide. JS
// keeps the policy: it says the limit and the window and gives the history.
// No Node dependency.
#pragma once

#include <cstdint>
#include <deque>

namespace fg {

class CorrectionAllowance {
 public:
  CorrectionAllowance() = default;
  // `recentNs`: the rewrite times JS counts in the window, in any order.
  CorrectionAllowance(int limit, int64_t windowNs, std::deque<int64_t> recentNs);

  // Whether a rewrite seen at `nowNs` is answered now; if so it counts from
  // then on. A refused one is not counted: JS takes over and records it.
  bool Take(int64_t nowNs);

  int limit() const { return limit_; }
  int64_t windowNs() const { return windowNs_; }
  // The rewrites inside the window as of the last Take, oldest first.
  const std::deque<int64_t>& recentNs() const { return recentNs_; }

 private:
  int limit_ = 1;
  int64_t windowNs_ = 0;
  std::deque<int64_t> recentNs_;
};

}  // namespace fg
