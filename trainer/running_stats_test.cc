#include "trainer/running_stats.h"

#include <gtest/gtest.h>

#include <cmath>

namespace rlforge {
namespace {

TEST(RunningMeanStdTest, BatchedUpdatesEqualTheWholeStream) {
  RunningMeanStd s;
  s.Update({1, 2, 3});
  s.Update({4, 5});
  s.Update({6});
  // Mean 3.5, population variance 17.5/6 (the 1e-4 prior count barely moves them).
  EXPECT_NEAR(s.mean(), 3.5, 1e-3);
  EXPECT_NEAR(s.var(), 17.5 / 6, 1e-3);
  EXPECT_NEAR(s.count(), 6, 1e-3);
}

TEST(RewardScalerTest, ScalesByDiscountedReturnStdAndResetsOnDone) {
  RewardScaler scaler(1, 0.5, 100.0);
  std::vector<float> r = {2, 2, 2, 2};
  std::vector<uint8_t> done = {0, 1, 0, 0}, valid = {1, 1, 1, 1};
  scaler.ScaleInPlace(4, r.data(), done.data(), valid.data());
  // Returns: 2, 3, (reset) 2, 3 -> every reward is divided by a positive std.
  for (float x : r) EXPECT_GT(x, 0.f);
  EXPECT_NE(r[0], 2.f);
}

TEST(RewardScalerTest, ClipsAndSkipsInvalidSteps) {
  RewardScaler scaler(1, 0.99, 0.5);
  std::vector<float> r = {100, 7};
  std::vector<uint8_t> done = {0, 0}, valid = {1, 0};
  scaler.ScaleInPlace(2, r.data(), done.data(), valid.data());
  EXPECT_LE(std::fabs(r[0]), 0.5f);
  EXPECT_EQ(r[1], 7.f);
}

}  // namespace
}  // namespace rlforge
