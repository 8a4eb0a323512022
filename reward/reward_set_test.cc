#include "reward/reward_set.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <thread>

#include "reward/verifiers.h"

namespace rlforge::reward {
namespace {

// Scores by the response text: "nan", "throw", "error", "sleep" (longer than any timeout
// here), or the response length.
class ScriptedReward final : public Reward {
 public:
  SampleScore ScoreOne(const Sample& s) const override {
    if (s.response == "nan") return SampleScore::Ok(std::nan(""));
    if (s.response == "throw") throw std::runtime_error("boom");
    if (s.response == "error") return SampleScore::Error("cannot parse");
    if (s.response == "sleep") std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    return SampleScore::Ok(static_cast<double>(s.response.size()));
  }
};

std::vector<Sample> Batch(std::vector<std::string> responses) {
  std::vector<Sample> out;
  for (auto& r : responses) out.push_back({"p", r, "4", -1});
  return out;
}

TEST(RewardSetTest, WeightedTotalAndPerRewardMetrics) {
  RewardSet set;
  set.Add("correct", 1.0, 5, std::shared_ptr<const Reward>(MakeExactAnswer(Extract::kAuto, false)));
  set.Add("short", 0.5, 5, std::shared_ptr<const Reward>(MakeLengthPenalty(4, 2, false)));
  const BatchScores s = set.Score(Batch({"4", "5", "The answer is 4"}));
  ASSERT_EQ(s.total.size(), 3u);
  EXPECT_DOUBLE_EQ(s.total[0], 1.0);
  EXPECT_DOUBLE_EQ(s.total[1], 0.0);
  EXPECT_DOUBLE_EQ(s.total[2], 1.0 - 0.5);
  EXPECT_TRUE(s.ok[0] && s.ok[1] && s.ok[2]);
  auto m = s.Metrics();
  EXPECT_DOUBLE_EQ(m["reward/correct/mean"], 2.0 / 3.0);
  EXPECT_DOUBLE_EQ(m["reward/short/mean"], -1.0 / 3.0);
  EXPECT_DOUBLE_EQ(m["reward/total/mean"], 0.5);
  EXPECT_EQ(m["reward/failed_samples"], 0);
  EXPECT_EQ(m["reward/correct/errors"], 0);
  EXPECT_GT(m["reward/correct/std"], 0);
}

TEST(RewardSetTest, FailuresAreMarkedNeverZero) {
  RewardSet set;
  set.Add("scripted", 1.0, 5, std::make_shared<ScriptedReward>());
  const BatchScores s = set.Score(Batch({"ok", "nan", "throw", "error"}));
  EXPECT_TRUE(s.ok[0]);
  EXPECT_EQ(s.total[0], 2);
  for (size_t i = 1; i < 4; ++i) {
    EXPECT_FALSE(s.ok[i]);
    EXPECT_TRUE(std::isnan(s.total[i]));
  }
  EXPECT_EQ(s.rewards[0].scores[1].status, ScoreStatus::kNotFinite);
  EXPECT_NE(s.error[1].find("reward 'scripted' on sample 1: not_finite: returned nan"),
            std::string::npos)
      << s.error[1];
  EXPECT_NE(s.error[2].find("threw: boom"), std::string::npos) << s.error[2];
  EXPECT_NE(s.error[3].find("error: cannot parse"), std::string::npos) << s.error[3];
  auto m = s.Metrics();
  EXPECT_EQ(m["reward/failed_samples"], 3);
  EXPECT_EQ(m["reward/scripted/errors"], 3);
  EXPECT_EQ(m["reward/scripted/mean"], 2);  // only the scored sample counts
}

TEST(RewardSetTest, TimeoutMarksTheSampleAndScoringContinues) {
  RewardSet set;
  set.Add("slow", 1.0, 0.2, std::make_shared<ScriptedReward>());
  set.Add("fast", 1.0, 5, std::shared_ptr<const Reward>(MakeExactAnswer(Extract::kAuto, false)));
  const BatchScores s = set.Score(Batch({"a", "sleep", "4"}));
  EXPECT_TRUE(s.ok[0]);
  EXPECT_FALSE(s.ok[1]);
  EXPECT_EQ(s.rewards[0].scores[1].status, ScoreStatus::kTimeout);
  EXPECT_NE(s.error[1].find("reward 'slow' on sample 1: timeout: timed out after 0.2 s"),
            std::string::npos)
      << s.error[1];
  EXPECT_TRUE(s.ok[2]) << s.error[2];
  EXPECT_DOUBLE_EQ(s.total[2], 1.0 + 1.0);
}

TEST(RewardSetTest, ManyTimeoutsStopWaitingForTheBatch) {
  RewardSet set;
  set.Add("slow", 1.0, 0.05, std::make_shared<ScriptedReward>());
  std::vector<std::string> responses(kMaxTimeoutsPerBatch + 3, "sleep");
  const BatchScores s = set.Score(Batch(responses));
  for (size_t i = 0; i < responses.size(); ++i) EXPECT_FALSE(s.ok[i]);
  EXPECT_NE(s.error.back().find("not scored"), std::string::npos) << s.error.back();
}

TEST(RewardSetTest, CreateFromOptionsNamesTheBadReward) {
  RewardOptions o;
  EXPECT_NE(RewardSet::Create(o).status().message().find("no rewards"), std::string::npos);
  RewardSpec good;
  good.name = "correct";
  good.kind = RewardKind::kExactAnswer;
  RewardSpec bad;
  bad.name = "format";
  bad.kind = RewardKind::kRegexFormat;
  bad.params.pattern = "(";
  o.rewards = {good, bad};
  auto s = RewardSet::Create(o).status();
  EXPECT_NE(s.message().find("reward.rewards[1] (format): params.pattern"), std::string::npos) << s;
  o.rewards = {good};
  auto set = RewardSet::Create(o);
  ASSERT_TRUE(set.ok());
  EXPECT_EQ(set->size(), 1u);
}

}  // namespace
}  // namespace rlforge::reward
