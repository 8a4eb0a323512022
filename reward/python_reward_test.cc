// The python reward: verl's and TRL's signatures, and every way a user's function can
// misbehave (raise, hang, crash, print, NaN, a wrong type, an import that fails).
#include "reward/python_reward.h"

#include <cmath>

#include "gtest/gtest.h"
#include "reward/reward_set.h"
#include "rlforge_paths.h"

namespace rlforge::reward {
namespace {

std::string File(const std::string& name) {
  return std::string(RLFORGE_SOURCE_DIR_DEFAULT) + "/reward/testdata/python/" + name;
}

PythonRewardOptions Options(const std::string& file, const std::string& function) {
  PythonRewardOptions o;
  o.path = File(file);
  o.function = function;
  o.workers = 2;
  o.timeout_s = 10;  // the hanging sample sleeps 1000 s; the others take milliseconds
  return o;
}

std::shared_ptr<const Reward> Make(const std::string& file, const std::string& function) {
  absl::StatusOr<std::shared_ptr<const Reward>> r = MakePythonReward(Options(file, function));
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : nullptr;
}

Sample S(const std::string& response, const std::string& answer = "42") {
  return {"What is 40 + 2?", response, answer};
}

TEST(PythonRewardTest, VerlSignatureScoresABatchOnItsPool) {
  auto r = Make("verl_reward.py", "compute_score");
  ASSERT_NE(r, nullptr);
  std::vector<SampleScore> s = r->ScoreBatch({S("42"), S("41"), S(" 42 "), S("dict"), S("7", "7")});
  ASSERT_EQ(s.size(), 5u);
  for (const SampleScore& x : s) ASSERT_TRUE(x.ok()) << x.error;
  EXPECT_EQ(s[0].value, 1.0);
  EXPECT_EQ(s[1].value, 0.0);
  EXPECT_EQ(s[2].value, 1.0);  // the user's print() did not get into the replies
  EXPECT_EQ(s[3].value, 0.5);  // verl's dict form: its "score"
  EXPECT_EQ(s[4].value, 1.0);
}

TEST(PythonRewardTest, TrlSignatureGetsListsAndTheAnswerColumn) {
  auto r = Make("trl_reward.py", "reward_len");
  ASSERT_NE(r, nullptr);
  std::vector<SampleScore> s = r->ScoreBatch({S("abc"), S("42")});
  ASSERT_TRUE(s[0].ok() && s[1].ok()) << s[0].error << s[1].error;
  EXPECT_EQ(s[0].value, 3.0);
  EXPECT_EQ(s[1].value, 12.0);
}

TEST(PythonRewardTest, MisbehavingSamplesFailAloneAndThePoolRecovers) {
  auto r = Make("verl_reward.py", "compute_score");
  ASSERT_NE(r, nullptr);
  std::vector<SampleScore> s =
      r->ScoreBatch({S("raise"), S("hang"), S("crash"), S("str"), S("42"), S("nan")});
  EXPECT_EQ(s[0].status, ScoreStatus::kError);
  EXPECT_NE(s[0].error.find("verl_reward.py:9: ValueError: asked to raise"), std::string::npos)
      << s[0].error;
  EXPECT_EQ(s[1].status, ScoreStatus::kTimeout);
  EXPECT_EQ(s[2].status, ScoreStatus::kError);
  EXPECT_NE(s[2].error.find("ended while scoring (exit 3)"), std::string::npos) << s[2].error;
  EXPECT_EQ(s[3].status, ScoreStatus::kError);
  EXPECT_NE(s[3].error.find("returned str"), std::string::npos) << s[3].error;
  ASSERT_TRUE(s[4].ok()) << s[4].error;
  EXPECT_EQ(s[4].value, 1.0);
  ASSERT_TRUE(s[5].ok());  // RewardSet turns it into kNotFinite, below
  EXPECT_TRUE(std::isnan(s[5].value));
  // The killed and crashed processes were started again: the next batch is scored.
  std::vector<SampleScore> again = r->ScoreBatch({S("42"), S("42"), S("0")});
  for (const SampleScore& x : again) ASSERT_TRUE(x.ok()) << x.error;
}

TEST(PythonRewardTest, RewardSetReportsNanAsNotFinite) {
  RewardSet set;
  set.Add("py", 1.0, 10, Make("verl_reward.py", "compute_score"));
  BatchScores b = set.Score({S("42"), S("nan")});
  EXPECT_TRUE(b.ok[0]);
  EXPECT_EQ(b.total[0], 1.0);
  EXPECT_FALSE(b.ok[1]);
  EXPECT_EQ(b.rewards[0].scores[1].status, ScoreStatus::kNotFinite);
}

TEST(PythonRewardTest, ImportProblemsNameTheFileAndLine) {
  auto err = [](const std::string& file, const std::string& fn) {
    absl::StatusOr<std::shared_ptr<const Reward>> r = MakePythonReward(Options(file, fn));
    EXPECT_FALSE(r.ok());
    return r.ok() ? std::string() : std::string(r.status().message());
  };
  EXPECT_NE(err("bad_syntax.py", "compute_score").find("bad_syntax.py:3: SyntaxError"),
            std::string::npos);
  EXPECT_NE(err("import_raises.py", "f").find("import_raises.py:2: RuntimeError: no model"),
            std::string::npos);
  EXPECT_NE(err("wrong_signature.py", "score").find("wrong_signature.py:2: score(text, reference) "
                                                    "takes neither verl's"),
            std::string::npos);
  EXPECT_NE(err("verl_reward.py", "missing").find("no function named missing"), std::string::npos);
  EXPECT_NE(err("no_such_file.py", "f").find("no such file"), std::string::npos);
  PythonRewardOptions o = Options("verl_reward.py", "compute_score");
  o.python = "/usr/bin/no_such_python";
  absl::StatusOr<std::shared_ptr<const Reward>> r = MakePythonReward(o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("cannot start /usr/bin/no_such_python"), std::string::npos)
      << r.status();
}

}  // namespace
}  // namespace rlforge::reward
