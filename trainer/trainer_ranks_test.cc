#include "trainer/trainer_ranks.h"

#include <gtest/gtest.h>

#include <numeric>

namespace rlforge {
namespace {

TEST(ShareOfTest, SharesAreContiguousCoverEveryItemAndBalanceTokens) {
  const std::vector<int64_t> costs = {10, 10, 40, 10, 10, 10, 5, 5};  // 100 tokens
  for (int n = 1; n <= 4; ++n) {
    size_t next = 0;
    for (int r = 0; r < n; ++r) {
      const Share s = ShareOf(costs, r, n);
      ASSERT_FALSE(s.weight_zero) << "rank " << r << " of " << n;
      EXPECT_EQ(s.begin, next) << "rank " << r << " of " << n;
      const int64_t tokens =
          std::accumulate(costs.begin() + s.begin, costs.begin() + s.end, int64_t{0});
      EXPECT_LE(std::abs(tokens - 100 / n), 40 / 2 + 10) << "rank " << r << " of " << n;
      next = s.end;
    }
    EXPECT_EQ(next, costs.size()) << n << " ranks";
  }
}

TEST(ShareOfTest, ARankWithoutItemsStandsInWithTheFirstAtWeightZero) {
  const std::vector<int64_t> costs = {7, 9};
  int empty = 0;
  for (int r = 0; r < 3; ++r) {
    const Share s = ShareOf(costs, r, 3);
    if (s.weight_zero) {
      ++empty;
      EXPECT_EQ(s.begin, 0u);
      EXPECT_EQ(s.end, 1u);
    }
  }
  EXPECT_EQ(empty, 1);
}

TEST(ShareCountsTest, WeightsAreLocalOverGlobalDenominators) {
  ShareCounts c;
  c.tokens = 30;
  c.rows = 2;
  c.global_tokens = 120;
  c.global_rows = 8;
  EXPECT_DOUBLE_EQ(c.Weight(LossAggregation::kTokenMean), 0.25);
  EXPECT_DOUBLE_EQ(c.Weight(LossAggregation::kSeqMeanTokenMean), 0.25);
  c.rows = 4;
  EXPECT_DOUBLE_EQ(c.Weight(LossAggregation::kSeqMeanTokenSum), 0.5);
  EXPECT_DOUBLE_EQ(c.Weight(LossAggregation::kSeqMeanTokenSumNorm), 0.5);
  EXPECT_DOUBLE_EQ(c.Weight(LossAggregation::kTokenMean), 0.25);
  ShareCounts none;
  EXPECT_EQ(none.Weight(LossAggregation::kTokenMean), 0.0);
}

}  // namespace
}  // namespace rlforge
