// Unit tests for native/correction_allowance.cc: the "corrected at once" rule
// of lib/guard/fight.ts (a rewrite counts while now - at < window; at most
// `limit` in the window), checked by hand and, over seeded random sequences,
// against a plain model of FightTracker's count.
#include "correction_allowance.h"

#include <random>
#include <vector>

#include "test_harness.h"

namespace {

using fg::CorrectionAllowance;

constexpr int64_t kMs = 1'000'000;

TEST_CASE("correction allowance: at most limit within the window, a refusal not counted") {
  CorrectionAllowance allowance(2, 100 * kMs, {});
  EXPECT_TRUE(allowance.Take(0));
  EXPECT_TRUE(allowance.Take(10 * kMs));
  EXPECT_FALSE(allowance.Take(20 * kMs));  // a third within 100 ms
  EXPECT_FALSE(allowance.Take(99 * kMs));
  EXPECT_EQ(allowance.recentNs().size(), size_t{2});  // the refused ones did not count
  EXPECT_TRUE(allowance.Take(100 * kMs));   // the first is out of the window (100 - 0 >= 100)
  EXPECT_FALSE(allowance.Take(105 * kMs));  // 10 and 100 are in it
  EXPECT_TRUE(allowance.Take(110 * kMs));
}

TEST_CASE("correction allowance: the history JS gives counts, in any order") {
  CorrectionAllowance allowance(2, 60'000 * kMs, {50 * kMs, 10 * kMs});
  EXPECT_FALSE(allowance.Take(60 * kMs));
  EXPECT_EQ(allowance.recentNs().front(), 10 * kMs);
  EXPECT_TRUE(allowance.Take(60'010 * kMs));  // 10 ms is out, 50 ms still in
  EXPECT_FALSE(allowance.Take(60'020 * kMs));
  EXPECT_TRUE(allowance.Take(60'050 * kMs));
}

TEST_CASE("correction allowance: seeded random rewrites agree with the tracker's count") {
  std::mt19937 random(1202);
  for (int run = 0; run < 200; ++run) {
    const int limit = 1 + static_cast<int>(random() % 5);
    const int64_t window = static_cast<int64_t>(1 + random() % 50) * kMs;
    CorrectionAllowance allowance(limit, window, {});
    std::vector<int64_t> answered;  // the model: every rewrite answered, by time
    int64_t now = 0;
    for (int step = 0; step < 200; ++step) {
      now += static_cast<int64_t>(random() % (2 * static_cast<uint64_t>(window)));
      size_t inWindow = 0;
      for (const int64_t at : answered) inWindow += now - at < window ? 1 : 0;
      const bool expected = inWindow < static_cast<size_t>(limit);
      if (expected) answered.push_back(now);
      EXPECT_EQ(allowance.Take(now), expected);
    }
  }
}

}  // namespace
