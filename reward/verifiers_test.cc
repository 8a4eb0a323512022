#include "reward/verifiers.h"

#include <gtest/gtest.h>

namespace rlforge::reward {
namespace {

double ScoreOf(const Reward& r, const std::string& response, const std::string& answer,
               int64_t tokens = -1) {
  SampleScore s = r.ScoreOne({"prompt", response, answer, tokens});
  EXPECT_TRUE(s.ok()) << s.error;
  return s.value;
}

TEST(VerifiersTest, NormalizeAnswer) {
  EXPECT_EQ(NormalizeAnswer("  The   Answer.\n", false), "the answer");
  EXPECT_EQ(NormalizeAnswer("**$42$.**", false), "42");
  EXPECT_EQ(NormalizeAnswer("\"Paris\"!", true), "Paris");
  EXPECT_EQ(NormalizeAnswer("3.14", false), "3.14");
}

TEST(VerifiersTest, ExtractAnswer) {
  EXPECT_EQ(*ExtractAnswer("so \\boxed{\\frac{1}{2}} done", Extract::kAuto, false), "\\frac{1}{2}");
  EXPECT_EQ(*ExtractAnswer("Thus the answer is 357.", Extract::kAuto, false), "357.");
  EXPECT_EQ(*ExtractAnswer("Answer: 12\nmore text", Extract::kAnswerIs, false), "12");
  EXPECT_EQ(*ExtractAnswer("1 then 2,500 then -7.5 end", Extract::kLastNumber, false), "-7.5");
  EXPECT_EQ(*ExtractAnswer("357", Extract::kAuto, false), "357");
  EXPECT_FALSE(ExtractAnswer("no box here", Extract::kBoxed, false).has_value());
  EXPECT_FALSE(ExtractAnswer("\\boxed{unclosed", Extract::kBoxed, false).has_value());
  EXPECT_EQ(*ExtractAnswer("I get 3 and then 4", Extract::kAuto, true), "4");
}

TEST(VerifiersTest, ParseNumber) {
  EXPECT_EQ(*ParseNumber("1,234.5"), 1234.5);
  EXPECT_EQ(*ParseNumber("-3"), -3);
  EXPECT_EQ(*ParseNumber("50%"), 50);
  EXPECT_EQ(*ParseNumber("1e3"), 1000);
  EXPECT_FALSE(ParseNumber("abc").has_value());
  EXPECT_FALSE(ParseNumber("12abc").has_value());
  EXPECT_FALSE(ParseNumber("inf").has_value());
}

TEST(VerifiersTest, ExactAnswer) {
  auto r = MakeExactAnswer(Extract::kAuto, false);
  EXPECT_EQ(ScoreOf(*r, "357", "357"), 1);
  EXPECT_EQ(ScoreOf(*r, " 357. ", "357"), 1);
  EXPECT_EQ(ScoreOf(*r, "The answer is 357.", "357"), 1);
  EXPECT_EQ(ScoreOf(*r, "reasoning... \\boxed{357}", "357"), 1);
  EXPECT_EQ(ScoreOf(*r, "The answer is PARIS", "Paris"), 1);
  EXPECT_EQ(ScoreOf(*r, "358", "357"), 0);
  EXPECT_EQ(ScoreOf(*r, "3570", "357"), 0);
  EXPECT_EQ(ScoreOf(*MakeExactAnswer(Extract::kAuto, true), "paris", "Paris"), 0);
  EXPECT_EQ(ScoreOf(*MakeExactAnswer(Extract::kBoxed, false), "357", "357"), 0);
}

TEST(VerifiersTest, Numeric) {
  auto r = MakeNumeric(Extract::kAuto, 1e-6, 0.01);
  EXPECT_EQ(ScoreOf(*r, "about 99.5", "100"), 1);
  EXPECT_EQ(ScoreOf(*r, "about 98", "100"), 0);
  EXPECT_EQ(ScoreOf(*r, "The answer is 1,000.", "1000"), 1);
  EXPECT_EQ(ScoreOf(*r, "no number", "5"), 0);
  SampleScore bad = r->ScoreOne({"p", "5", "five", -1});
  EXPECT_EQ(bad.status, ScoreStatus::kError);
  EXPECT_NE(bad.error.find("'five' is not a number"), std::string::npos);
}

TEST(VerifiersTest, RegexFormat) {
  auto contains = MakeRegexFormat(R"(answer is \p{N}+)", false);
  ASSERT_TRUE(contains.ok());
  EXPECT_EQ(ScoreOf(**contains, "so the answer is 42.", ""), 1);
  EXPECT_EQ(ScoreOf(**contains, "42", ""), 0);
  auto full = MakeRegexFormat(R"(-?\d+)", true);
  ASSERT_TRUE(full.ok());
  EXPECT_EQ(ScoreOf(**full, "-42", ""), 1);
  EXPECT_EQ(ScoreOf(**full, "-42 ", ""), 0);
  EXPECT_FALSE(MakeRegexFormat("(unclosed", false).ok());
}

TEST(VerifiersTest, CatastrophicRegexGivesUpWithAnError) {
  // (a+)+$ on "aaaa...b" backtracks exponentially; ICU's matcher stops at the time limit.
  auto r = MakeRegexFormat("(a+)+$", false, /*time_limit_s=*/0.05);
  ASSERT_TRUE(r.ok());
  SampleScore s = (*r)->ScoreOne({"p", std::string(40, 'a') + "b", "", -1});
  EXPECT_EQ(s.status, ScoreStatus::kError);
  EXPECT_NE(s.error.find("time limit"), std::string::npos) << s.error;
}

TEST(VerifiersTest, LengthPenaltyIsDapoSoftOverlong) {
  auto r = MakeLengthPenalty(/*max_length=*/10, /*buffer=*/4, /*tokens=*/true);
  EXPECT_EQ(ScoreOf(*r, "", "", 6), 0);
  EXPECT_DOUBLE_EQ(ScoreOf(*r, "", "", 8), -0.5);
  EXPECT_DOUBLE_EQ(ScoreOf(*r, "", "", 10), -1);
  EXPECT_EQ(ScoreOf(*r, "", "", 11), -1);
  // Unknown token count: Unicode characters ("é" is one).
  EXPECT_EQ(ScoreOf(*r, "\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9", ""), 0);
  auto chars = MakeLengthPenalty(3, 0, /*tokens=*/false);
  EXPECT_EQ(ScoreOf(*chars, "abcd", "", 1), -1);
  EXPECT_EQ(ScoreOf(*chars, "abc", "", 9), 0);
}

}  // namespace
}  // namespace rlforge::reward
