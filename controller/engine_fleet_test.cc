#include "controller/engine_fleet.h"

#include <gtest/gtest.h>

namespace rlforge {
namespace {

using Shares = std::vector<std::vector<size_t>>;

TEST(DealByTokens, EachGroupGoesWholeToTheEngineWithFewestOutstandingTokens) {
  // Outstanding after each deal: {10,0} {10,3} {10,6} {10,9} {10,21} {16,21}.
  EXPECT_EQ(DealByTokens({10, 3, 3, 3, 12, 6}, 2), (Shares{{0, 5}, {1, 2, 3, 4}}));
  // Equal costs: round-robin; ties go to the lower index.
  EXPECT_EQ(DealByTokens({5, 5, 5, 5, 5}, 3), (Shares{{0, 3}, {1, 4}, {2}}));
  // More engines than groups: some get nothing.
  EXPECT_EQ(DealByTokens({7}, 3), (Shares{{0}, {}, {}}));
  EXPECT_EQ(DealByTokens({4, 4}, 1), (Shares{{0, 1}}));
  EXPECT_EQ(DealByTokens({}, 2), (Shares{{}, {}}));
}

TEST(EngineFleet, OnlyEnginesServingTheRequiredVersionAreCurrent) {
  EngineFleet fleet({"rollout-0", "rollout-1", "rollout-2"});
  EXPECT_EQ(*fleet.Current(), (std::vector<size_t>{0, 1, 2})) << "all start at version 0";
  fleet.Require(3);
  fleet.Served(0, 3);
  fleet.Served(1, 2);
  fleet.Served(2, 3);
  EXPECT_EQ(*fleet.Current(), (std::vector<size_t>{0, 2}));
  EXPECT_TRUE(fleet.CheckReply(0, 3).ok());
  absl::Status stale = fleet.CheckReply(1, 2);
  EXPECT_EQ(stale.message(),
            "rollout-1 generated with policy version 2 where version 3 is required (synchronous "
            "mode)");
  fleet.Served(0, 2);
  fleet.Served(2, 1);
  EXPECT_EQ(fleet.Current().status().message(),
            "no rollout engine serves policy version 3 (rollout-0 serves 2, rollout-1 serves 2, "
            "rollout-2 serves 1)");
  EXPECT_EQ(EngineFleet({}).Current().status().message(), "the job has no rollout worker");
}

}  // namespace
}  // namespace rlforge
