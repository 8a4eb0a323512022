#include "reward/answer_check.h"

#include <gtest/gtest.h>

namespace rlforge::reward {
namespace {

TEST(AnswerJudgeTest, ExactJudgesTheWholeNormalisedResponse) {
  AnswerJudge j(AnswerCheck::kExact);
  EXPECT_TRUE(j.Correct(" 357. ", "357"));
  EXPECT_FALSE(j.Correct("The answer is 357", "357"));
  EXPECT_EQ(j.FinalAnswer("  Paris. "), "paris");
}

TEST(AnswerJudgeTest, NumericReadsTheFinalNumber) {
  AnswerJudge j(AnswerCheck::kNumeric);
  EXPECT_TRUE(j.Correct("so 3 + 4 = 7", "7"));
  EXPECT_FALSE(j.Correct("so 3 + 4 = 8", "7"));
  EXPECT_FALSE(j.Correct("7", "seven"));  // a reference that is not a number: never correct
}

TEST(AnswerJudgeTest, MathReadsGsm8kSolutionsAndEquivalentForms) {
  AnswerJudge j(AnswerCheck::kMath);
  EXPECT_TRUE(
      j.Correct("He works 6 + 4 = 10 hours.\nHe earns 10 * 5 = 50 dollars.\n#### 50", "50"));
  EXPECT_FALSE(j.Correct("He earns 10 * 5 = 50 dollars.\n#### 51", "50"));
  EXPECT_TRUE(j.Correct("The answer is \\boxed{\\frac{1}{2}}", "0.5"));
  EXPECT_EQ(j.FinalAnswer("steps\n#### 1,234"), "1,234");
  EXPECT_TRUE(j.SameAnswer("1,234", "1234"));
  EXPECT_TRUE(j.SameAnswer("0.5", "\\frac{1}{2}"));
  EXPECT_FALSE(j.SameAnswer("2", "\\frac{1}{2}"));
  EXPECT_FALSE(j.Correct("no answer", ""));
}

TEST(MajorityTest, EquivalentAnswersVoteTogetherAndFirstSeenWinsTies) {
  AnswerJudge j(AnswerCheck::kMath);
  MajorityVote v = Majority(j, {"1/2", std::nullopt, "3", "0.5", "3", "\\frac{1}{2}"});
  EXPECT_EQ(v.answer, "1/2");
  EXPECT_EQ(v.votes, 3);
  v = Majority(j, {"4", "5"});
  EXPECT_EQ(v.answer, "4");
  v = Majority(j, {std::nullopt});
  EXPECT_FALSE(v.answer.has_value());
  EXPECT_EQ(v.votes, 0);
}

TEST(PassAtKTest, MatchesTheClosedFormByHand) {
  EXPECT_DOUBLE_EQ(PassAtK(5, 2, 2), 1.0 - 3.0 / 10.0);  // 1 - C(3,2)/C(5,2)
  EXPECT_DOUBLE_EQ(PassAtK(4, 1, 1), 0.25);
  EXPECT_DOUBLE_EQ(PassAtK(4, 0, 4), 0.0);
  EXPECT_DOUBLE_EQ(PassAtK(10, 9, 2), 1.0);
  EXPECT_NEAR(PassAtK(8, 3, 4), 1.0 - 5.0 / 70.0, 1e-12);  // 1 - C(5,4)/C(8,4)
}

}  // namespace
}  // namespace rlforge::reward
