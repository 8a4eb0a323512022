#include "controller/algorithm.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "controller/lm_loop.h"

namespace rlforge {
namespace {

// Every registered algorithm has a loop, and the loop starts exactly the roles the registry
// lists, with the counts their sections give.
TEST(AlgorithmTest, EveryRegisteredAlgorithmHasALoopStartingItsRoles) {
  const std::string ckpt = ::testing::TempDir() + "/algorithm_test_ckpt";
  std::filesystem::create_directories(ckpt);
  for (const AlgorithmSpec& spec : Algorithms()) {
    SCOPED_TRACE(spec.name);
    JobConfig c;
    c.job.algorithm = &spec;
    c.model.path = ckpt;  // LM loops refuse a missing checkpoint before any actor starts
    c.reward.workers = 3;
    auto algo = CreateAlgorithm(c);
    ASSERT_TRUE(algo.ok()) << algo.status();
    std::vector<std::string> roles;
    for (const RoleRequirement& r : (*algo)->Roles()) {
      roles.push_back(r.role);
      if (r.role == "reward") {
        EXPECT_EQ(r.count, 3);
      }
    }
    std::vector<std::string> want = spec.roles;
    std::sort(roles.begin(), roles.end());
    std::sort(want.begin(), want.end());
    EXPECT_EQ(roles, want);
  }
}

TEST(AlgorithmTest, LmJobsStartTheRewardWorkersTheConfigAsksFor) {
  JobConfig c;
  c.reward.workers = 2;
  c.reward.external = true;
  c.rollout.external = true;
  std::vector<RoleRequirement> roles = LmRoles(c);
  ASSERT_EQ(roles.size(), 3u);
  EXPECT_EQ(roles[1].role, "rollout");
  EXPECT_TRUE(roles[1].external);
  EXPECT_EQ(roles[2].role, "reward");
  EXPECT_EQ(roles[2].count, 2);
  EXPECT_TRUE(roles[2].external);
}

TEST(AlgorithmTest, LmLoopRefusesAMissingCheckpoint) {
  JobConfig c;
  c.job.algorithm = FindAlgorithm("lm_ppo");
  c.model.path = ::testing::TempDir() + "/no_such_checkpoint";
  auto algo = CreateAlgorithm(c);
  ASSERT_FALSE(algo.ok());
  EXPECT_NE(algo.status().message().find("job.algorithm lm_ppo starts from one"), std::string::npos)
      << algo.status();
}

}  // namespace
}  // namespace rlforge
