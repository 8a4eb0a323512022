#include "data/arith_task.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <set>

namespace rlforge {
namespace {

TEST(ArithmeticTaskTest, DeterministicFromSeed) {
  auto task = ArithmeticTask::Create({});
  ASSERT_TRUE(task.ok()) << task.status();
  const auto a = task->Examples(7, Split::kTrain, 0, 50);
  const auto b = task->Examples(7, Split::kTrain, 0, 50);
  const auto c = task->Examples(8, Split::kTrain, 0, 50);
  int same_as_other_seed = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].prompt, b[i].prompt);
    EXPECT_EQ(a[i].answer, b[i].answer);
    same_as_other_seed += a[i].prompt == c[i].prompt;
  }
  EXPECT_LT(same_as_other_seed, 5);
  // Random access: example 30 alone equals the 30th of the batch.
  EXPECT_EQ(task->Example(7, Split::kTrain, 30).prompt, a[30].prompt);
}

TEST(ArithmeticTaskTest, AnswersAreCorrect) {
  ArithmeticOptions o;
  o.ops = {"+", "-", "*"};
  o.min_digits = 2;
  o.max_digits = 4;
  auto task = ArithmeticTask::Create(o);
  ASSERT_TRUE(task.ok());
  for (const auto& ex : task->Examples(1, Split::kTrain, 0, 300)) {
    ASSERT_EQ(ex.prompt.back(), '=');
    const size_t op = ex.prompt.find_first_of("+-*");
    const int64_t x = std::stoll(ex.prompt.substr(0, op));
    const int64_t y = std::stoll(ex.prompt.substr(op + 1, ex.prompt.size() - op - 2));
    EXPECT_GE(x, 10);
    EXPECT_LT(y, 10000);
    const char c = ex.prompt[op];
    const int64_t want = c == '+' ? x + y : c == '-' ? x - y : x * y;
    EXPECT_EQ(ex.answer, std::to_string(want)) << ex.prompt;
    EXPECT_GE(want, 0) << "allow_negative is false";
    EXPECT_EQ(ex.response, ex.answer);
  }
}

TEST(ArithmeticTaskTest, TrainAndHeldoutAreDisjoint) {
  ArithmeticOptions o;
  o.max_digits = 2;  // small space: collisions would show
  o.heldout_fraction = 0.2;
  auto task = ArithmeticTask::Create(o);
  ASSERT_TRUE(task.ok());
  std::set<std::string> train, heldout;
  for (uint64_t seed : {1, 2}) {
    for (const auto& ex : task->Examples(seed, Split::kTrain, 0, 2000)) train.insert(ex.prompt);
    for (const auto& ex : task->Examples(seed, Split::kHeldout, 0, 500)) heldout.insert(ex.prompt);
  }
  for (const auto& p : heldout) EXPECT_EQ(train.count(p), 0u) << p;
  EXPECT_GT(heldout.size(), 100u);
  EXPECT_GT(train.size(), 1000u);
}

TEST(ArithmeticTaskTest, QuestionStyleAndWrongAnswers) {
  ArithmeticOptions o;
  o.style = ArithmeticStyle::kQuestion;
  auto task = ArithmeticTask::Create(o);
  ASSERT_TRUE(task.ok());
  const auto ex = task->Example(3, Split::kHeldout, 0);
  EXPECT_EQ(ex.prompt.rfind("What is ", 0), 0u);
  EXPECT_EQ(ex.response, "The answer is " + ex.answer + ".");
  for (uint64_t s = 0; s < 200; ++s) {
    const auto e = task->Example(3, Split::kTrain, s);
    const std::string wrong = task->WrongAnswer(e, s);
    EXPECT_NE(wrong, e.answer) << e.prompt;
    EXPECT_EQ(wrong, task->WrongAnswer(e, s));
  }
}

TEST(ArithmeticTaskTest, AlphabetCoversEveryExample) {
  for (const ArithmeticStyle style : {ArithmeticStyle::kPlain, ArithmeticStyle::kQuestion}) {
    ArithmeticOptions o;
    o.style = style;
    o.ops = {"+", "-", "*"};
    o.allow_negative = true;
    auto task = ArithmeticTask::Create(o);
    ASSERT_TRUE(task.ok());
    const std::string alphabet = task->Alphabet();
    for (const auto& ex : task->Examples(5, Split::kTrain, 0, 300)) {
      for (char c : ex.prompt + ex.response) {
        EXPECT_NE(alphabet.find(c), std::string::npos) << ChoiceName(style) << ": '" << c << "'";
      }
    }
    std::set<char> unique(alphabet.begin(), alphabet.end());
    EXPECT_EQ(unique.size(), alphabet.size());
  }
}

TEST(ArithmeticTaskTest, CarrylessValueDropsEveryCarryAndBorrow) {
  EXPECT_EQ(ArithmeticTask::CarrylessValue(78, 5, "+"), 73);
  EXPECT_EQ(ArithmeticTask::CarrylessValue(99, 1, "+"), 90);
  EXPECT_EQ(ArithmeticTask::CarrylessValue(12, 34, "+"), 46);  // no carry: exact
  EXPECT_EQ(ArithmeticTask::CarrylessValue(52, 7, "-"), 55);
  EXPECT_EQ(ArithmeticTask::CarrylessValue(100, 1, "-"), 109);
  EXPECT_EQ(ArithmeticTask::CarrylessValue(3, 7, "-"), -4);  // negative: exact
  EXPECT_EQ(ArithmeticTask::CarrylessValue(12, 9, "*"), 108);
}

TEST(ArithmeticTaskTest, FlawedDemonstrationsChangeOnlyTrainResponses) {
  ArithmeticOptions clean;
  clean.max_digits = 2;
  ArithmeticOptions flawed = clean;
  flawed.demo_carry_errors = 0.5;
  auto a = ArithmeticTask::Create(clean).value();
  auto b = ArithmeticTask::Create(flawed).value();
  int differs = 0, flawed_count = 0;
  for (uint64_t i = 0; i < 2000; ++i) {
    PromptExample x = a.Example(3, Split::kTrain, i), y = b.Example(3, Split::kTrain, i);
    ASSERT_EQ(x.prompt, y.prompt);  // the same problems
    ASSERT_EQ(x.answer, y.answer);  // rewards still score the true value
    EXPECT_EQ(x.response, x.answer);
    int64_t l = 0, r = 0;
    char op = 0;
    ASSERT_EQ(std::sscanf(x.prompt.c_str(), "%ld%c%ld=", &l, &op, &r), 3);
    const int64_t carryless = ArithmeticTask::CarrylessValue(l, r, std::string(1, op));
    if (carryless == std::stoll(x.answer)) {
      EXPECT_EQ(y.response, x.answer) << x.prompt;
      continue;
    }
    ++differs;
    if (y.response != x.answer) {
      ++flawed_count;
      EXPECT_EQ(y.response, std::to_string(carryless)) << x.prompt;
    }
    PromptExample h = b.Example(3, Split::kHeldout, i);
    EXPECT_EQ(h.response, h.answer) << "held-out examples are never flawed";
  }
  ASSERT_GT(differs, 300);
  EXPECT_NEAR(static_cast<double>(flawed_count) / differs, 0.5, 0.06);
  flawed.demo_carry_errors = 1.5;
  EXPECT_NE(ArithmeticTask::Create(flawed).status().message().find("demo_carry_errors"),
            std::string::npos);
}

TEST(ArithmeticTaskTest, BadOptionsAreNamed) {
  ArithmeticOptions o;
  o.ops = {"/"};
  EXPECT_NE(ArithmeticTask::Create(o).status().message().find("op '/'"), std::string::npos);
  o = {};
  o.max_digits = 12;
  EXPECT_NE(ArithmeticTask::Create(o).status().message().find("max_digits"), std::string::npos);
  o = {};
  o.heldout_fraction = 1.5;
  EXPECT_FALSE(ArithmeticTask::Create(o).ok());
  o = {};
  o.max_digits = 1;
  o.ops = {"+"};
  o.heldout_fraction = 0.001;  // 100 problems: none held out
  EXPECT_NE(ArithmeticTask::Create(o).status().message().find("one split is empty"),
            std::string::npos);
}

}  // namespace
}  // namespace rlforge
