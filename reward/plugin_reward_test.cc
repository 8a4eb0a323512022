#include "reward/plugin_reward.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include "reward/reward_set.h"

namespace rlforge::reward {
namespace {

TEST(PluginRewardTest, ExamplePluginScores) {
  auto r = LoadPluginReward(RLFORGE_KEYWORD_PLUGIN, {"keyword=answer", "require_answer=true"});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)->ScoreOne({"p", "the answer is 4", "4", -1}).value, 1.0);
  EXPECT_EQ((*r)->ScoreOne({"p", "the answer is 5", "4", -1}).value, 0.0);
  EXPECT_EQ((*r)->ScoreOne({"p", "it is 4", "4", -1}).value, 0.0);
}

TEST(PluginRewardTest, LoadErrorsAreNamed) {
  auto s = LoadPluginReward("/nonexistent/libnope.so", {}).status();
  EXPECT_NE(s.message().find("reward plugin /nonexistent/libnope.so: cannot load"),
            std::string::npos)
      << s;
  s = LoadPluginReward(RLFORGE_KEYWORD_PLUGIN, {}).status();
  EXPECT_NE(s.message().find("create() failed: arg keyword=<text> is required"), std::string::npos)
      << s;
  s = LoadPluginReward(RLFORGE_KEYWORD_PLUGIN, {"colour=red"}).status();
  EXPECT_NE(s.message().find("unknown arg 'colour'"), std::string::npos) << s;
  s = LoadPluginReward(RLFORGE_KEYWORD_PLUGIN, {"novalue"}).status();
  EXPECT_NE(s.message().find("'novalue' is not key=value"), std::string::npos) << s;
}

TEST(PluginRewardTest, AbiVersionIsChecked) {
  setenv("RLFORGE_FAULTY_ABI", "2", 1);
  auto s = LoadPluginReward(RLFORGE_FAULTY_PLUGIN, {}).status();
  unsetenv("RLFORGE_FAULTY_ABI");
  EXPECT_NE(s.message().find("ABI version 2, but this rlforge speaks version 1"), std::string::npos)
      << s;
}

TEST(PluginRewardTest, FaultyPluginMarksSamples) {
  auto r = LoadPluginReward(RLFORGE_FAULTY_PLUGIN, {});
  ASSERT_TRUE(r.ok()) << r.status();
  RewardSet set;
  set.Add("faulty", 2.0, 0.3, std::shared_ptr<const Reward>(*std::move(r)));
  std::vector<Sample> batch = {{"p", "abc", "", -1},
                               {"p", "fail", "", -1},
                               {"p", "nan", "", -1},
                               {"p", "hang", "", -1},
                               {"p", "abcde", "", -1}};
  const BatchScores s = set.Score(batch);
  EXPECT_TRUE(s.ok[0]);
  EXPECT_DOUBLE_EQ(s.total[0], 6.0);
  EXPECT_NE(s.error[1].find("score() returned 1: cannot score 'fail'"), std::string::npos)
      << s.error[1];
  EXPECT_EQ(s.rewards[0].scores[2].status, ScoreStatus::kNotFinite);
  EXPECT_EQ(s.rewards[0].scores[3].status, ScoreStatus::kTimeout);
  EXPECT_TRUE(s.ok[4]);
  EXPECT_DOUBLE_EQ(s.total[4], 10.0);
}

}  // namespace
}  // namespace rlforge::reward
