#include "sim_bridge/envs/template_env.h"

#include <gtest/gtest.h>

#include "sim_bridge/vector_env.h"

namespace rlforge::sim {
namespace {

TEST(PointMassTest, PushingTowardTheOriginEarnsMoreThanPushingAway) {
  auto run = [](float sign) {
    PointMassEnv env;
    float obs[2];
    env.Reset(5, obs);
    double total = 0;
    for (int t = 0; t < 50; ++t) {
      float force = obs[0] > 0 ? -sign : sign;
      StepOutcome r = env.Step(&force, obs);
      total += r.reward;
      if (r.terminated) break;
    }
    return total;
  };
  EXPECT_GT(run(1.0f), run(-1.0f));
}

TEST(PointMassTest, LeavingTheTrackTerminatesWithPenalty) {
  PointMassEnv env;
  float obs[2];
  env.Reset(1, obs);
  float force = obs[0] >= 0 ? 1.0f : -1.0f;
  StepOutcome r;
  int t = 0;
  for (; t < 200 && !r.terminated; ++t) r = env.Step(&force, obs);
  EXPECT_TRUE(r.terminated);
  EXPECT_LT(r.reward, -100);
  EXPECT_GT(std::fabs(obs[0]), PointMassEnv::kEdge);
}

TEST(PointMassTest, IsRegisteredAndTruncatesAtItsLimit) {
  auto venv = LocalVectorEnv::Create("PointMass-v0", 2);
  ASSERT_TRUE(venv.ok());
  std::vector<float> obs;
  ASSERT_TRUE((*venv)->Reset(std::vector<int64_t>{1, 2}, &obs).ok());
  StepOutput out;
  std::vector<float> actions = {0.f, 0.f};  // at rest the mass never leaves
  for (int t = 1; t <= 200; ++t) {
    ASSERT_TRUE((*venv)->Step(actions.data(), &out).ok());
    EXPECT_EQ(out.truncated[0], t == 200 ? 1 : 0);
  }
  EXPECT_EQ(out.episodes.size(), 2u);
}

}  // namespace
}  // namespace rlforge::sim
