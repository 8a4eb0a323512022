#include "reward/math_answer.h"

#include <gtest/gtest.h>

namespace rlforge::reward {
namespace {

std::string Found(const std::string& response, Extract how = Extract::kAuto) {
  return FindFinalAnswer(response, how).value_or("<none>");
}

TEST(MathAnswerTest, FindsTheFinalAnswer) {
  EXPECT_EQ(Found("so 3 + 4 = 7\n#### 7"), "7");
  EXPECT_EQ(Found("first \\boxed{1} then \\boxed{\\frac{1}{\\sqrt{2}}}."), "\\frac{1}{\\sqrt{2}}");
  EXPECT_EQ(Found("The answer is 42. Next I check it: 6 * 7 = 42 and 3"), "42");
  EXPECT_EQ(Found("Answer: $\\frac{3}{4}$\n"), "$\\frac{3}{4}$");
  EXPECT_EQ(Found("The final answer is that she has 12 apples"), "12");
  EXPECT_EQ(Found("She pays $12 and then $5 more, so 17 dollars"), "17");
  EXPECT_EQ(Found("Half of it: $\\frac{1}{2}$"), "$\\frac{1}{2}$");
  EXPECT_EQ(Found("it is 75% of -3.5, about -2.625."), "-2.625");
  EXPECT_EQ(Found("we keep 3/4"), "3/4");
  EXPECT_EQ(Found("Monday"), "Monday");
  EXPECT_EQ(Found(""), "<none>");
  EXPECT_EQ(Found("<think>7 is wrong, 8</think> The answer is 9"), "9");
  EXPECT_EQ(Found("<think>cut off while thinking, 8"), "<none>");
  EXPECT_EQ(Found("1 and 2", Extract::kBoxed), "<none>");
  EXPECT_EQ(Found("answer: 5 then 6", Extract::kAnswerIs), "5 then 6");
  EXPECT_EQ(Found("answer: 5 then 6", Extract::kLastNumber), "6");
}

TEST(MathAnswerTest, VerifiesAgainstAReference) {
  EXPECT_TRUE(MathVerify("42", "The answer is 42.", Extract::kAuto));
  EXPECT_TRUE(MathVerify("Tom has 6 * 7 = 42 apples.\n#### 42", "\\boxed{42}", Extract::kAuto));
  EXPECT_TRUE(MathVerify("1234", "They paid $1,234 in total.", Extract::kAuto));
  EXPECT_TRUE(MathVerify("\\frac{3}{4}", "answer: 0.75", Extract::kAuto));
  EXPECT_TRUE(MathVerify("0.5", "#### 1/2", Extract::kAuto));
  EXPECT_FALSE(MathVerify("42", "The answer is 41.", Extract::kAuto));
  EXPECT_FALSE(MathVerify("42", "no idea", Extract::kAuto));
  // Only the last box counts.
  EXPECT_FALSE(MathVerify("1", "\\boxed{1} no wait \\boxed{2}", Extract::kAuto));
  EXPECT_FALSE(MathVerify("42", "42", Extract::kBoxed));
}

TEST(MathAnswerTest, MathRewardScoresAndRejectsAnEmptyReference) {
  auto r = MakeMath(Extract::kAuto);
  EXPECT_EQ(r->ScoreOne({"p", "\\boxed{12}", "12", -1}).value, 1.0);
  EXPECT_EQ(r->ScoreOne({"p", "\\boxed{13}", "12", -1}).value, 0.0);
  SampleScore empty = r->ScoreOne({"p", "\\boxed{12}", " ", -1});
  EXPECT_FALSE(empty.ok());
  EXPECT_EQ(empty.error, "the reference answer is empty");
}

TEST(MathAnswerTest, ThinkFormat) {
  auto text = MakeThinkFormat("think", AnswerForm::kText);
  auto boxed = MakeThinkFormat("think", AnswerForm::kBoxed);
  auto math = MakeThinkFormat("reason", AnswerForm::kMath);
  auto score = [](const Reward& r, const std::string& response) {
    return r.ScoreOne({"p", response, "", -1}).value;
  };
  EXPECT_EQ(score(*text, " <think>3+4=7</think>\nThe answer is 7"), 1.0);
  EXPECT_EQ(score(*text, "<think>3+4=7</think>   "), 0.0);             // no answer
  EXPECT_EQ(score(*text, "<think> </think> 7"), 0.0);                  // no reasoning
  EXPECT_EQ(score(*text, "7 <think>3+4</think> 7"), 0.0);              // not first
  EXPECT_EQ(score(*text, "<think>a</think><think>b</think> 7"), 0.0);  // two blocks
  EXPECT_EQ(score(*text, "<think>3+4=7 and no end"), 0.0);
  EXPECT_EQ(score(*boxed, "<think>3+4</think> so \\boxed{7}"), 1.0);
  EXPECT_EQ(score(*boxed, "<think>3+4</think> so 7"), 0.0);
  EXPECT_EQ(score(*math, "<reason>3+4</reason> it is seven"), 0.0);
  EXPECT_EQ(score(*math, "<reason>3+4</reason> it is 7 apples"), 1.0);
  EXPECT_FALSE(ParseChoice<AnswerForm>("boxy").ok());
}

}  // namespace
}  // namespace rlforge::reward
