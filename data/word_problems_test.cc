#include "data/word_problems.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <vector>

#include "common/atomic_file.h"
#include "data/jsonl_dataset.h"
#include "rlforge_paths.h"

namespace rlforge {
namespace {

std::string CommittedDir() {
  return std::string(RLFORGE_SOURCE_DIR_DEFAULT) + "/data/word_problems";
}

TEST(WordProblemsTest, Deterministic) {
  for (uint64_t i = 0; i < 50; ++i) {
    const WordProblem a = MakeWordProblem(7, Split::kTrain, i),
                      b = MakeWordProblem(7, Split::kTrain, i);
    EXPECT_EQ(a.question, b.question);
    EXPECT_EQ(a.solution, b.solution);
  }
  int same = 0;
  for (uint64_t i = 0; i < 50; ++i) {
    same += MakeWordProblem(7, Split::kTrain, i).question ==
            MakeWordProblem(8, Split::kTrain, i).question;
  }
  EXPECT_LT(same, 5);
}

TEST(WordProblemsTest, SplitsAreDisjoint) {
  std::set<std::string> train;
  for (const WordProblem& p : DistinctWordProblems(1, Split::kTrain, 3000)) {
    EXPECT_FALSE(IsHeldoutQuestion(p.question));
    train.insert(p.question);
  }
  for (const WordProblem& p : DistinctWordProblems(2, Split::kHeldout, 300)) {
    EXPECT_TRUE(IsHeldoutQuestion(p.question));
    EXPECT_EQ(train.count(p.question), 0u) << p.question;
  }
}

struct ParsedStep {
  int64_t a, b, c;
  char op;
};

// The "A op B = C" steps of a worked answer and the number after "####".
void ParseSolution(const std::string& solution, std::vector<ParsedStep>* steps, int64_t* answer) {
  static const std::regex step(R"((\d+) ([-+*/]) (\d+) = (\d+))");
  std::istringstream lines(solution);
  std::string line;
  while (std::getline(lines, line) && line.rfind("####", 0) != 0) {
    std::smatch m;
    ASSERT_TRUE(std::regex_search(line, m, step)) << solution;
    steps->push_back({std::stoll(m[1]), std::stoll(m[3]), std::stoll(m[4]), m[2].str()[0]});
  }
  ASSERT_EQ(line.rfind("#### ", 0), 0u) << solution;
  *answer = std::stoll(line.substr(5));
}

int64_t Recompute(const ParsedStep& s) {
  if (s.op == '/') {
    EXPECT_EQ(s.a % s.b, 0) << s.a << " / " << s.b;
  }
  return s.op == '+' ? s.a + s.b : s.op == '-' ? s.a - s.b : s.op == '*' ? s.a * s.b : s.a / s.b;
}

// Every step "A op B = C" is recomputed, and the final "#### N" is the last step's result.
TEST(WordProblemsTest, AnswersRecompute) {
  std::set<std::string> kinds;
  for (uint64_t i = 0; i < 2000; ++i) {
    const WordProblem p = MakeWordProblem(3, i % 2 ? Split::kTrain : Split::kHeldout, i);
    kinds.insert(p.kind);
    std::vector<ParsedStep> steps;
    int64_t answer = -1;
    ASSERT_NO_FATAL_FAILURE(ParseSolution(p.solution, &steps, &answer));
    for (const ParsedStep& s : steps) EXPECT_EQ(Recompute(s), s.c) << p.solution;
    EXPECT_TRUE(steps.size() == 1 || steps.size() == 2) << p.solution;
    EXPECT_EQ(steps.size(), p.steps.size());
    EXPECT_EQ(answer, steps.back().c) << p.solution;
    EXPECT_EQ(p.value, answer);
    EXPECT_GE(p.value, 0);
  }
  EXPECT_EQ(kinds.size(), 9u);  // every template
}

// A dropped carry: exactly one + or - step is written as ArithmeticTask::CarrylessValue of its
// operands, the steps before it are right, the steps after it recompute from its result, and
// the answer is wrong. Stopped early: the first step, right, then its result as the answer.
TEST(WordProblemsTest, SlipsAreWhatTheySay) {
  int dropped = 0, early = 0;
  for (uint64_t i = 0; i < 2000; ++i) {
    const WordProblem p = MakeWordProblem(5, Split::kTrain, i);
    std::vector<ParsedStep> right;
    int64_t answer = -1;
    ASSERT_NO_FATAL_FAILURE(ParseSolution(p.solution, &right, &answer));
    if (std::optional<WordProblem> d = SlipWordProblem(p, Slip::kDroppedCarry)) {
      ++dropped;
      std::vector<ParsedStep> steps;
      ASSERT_NO_FATAL_FAILURE(ParseSolution(d->solution, &steps, &answer));
      ASSERT_EQ(steps.size(), right.size()) << d->solution;
      int slips = 0;
      for (const ParsedStep& s : steps) {
        if (Recompute(s) == s.c) continue;
        ++slips;
        EXPECT_TRUE(s.op == '+' || s.op == '-') << d->solution;
        EXPECT_EQ(s.c, ArithmeticTask::CarrylessValue(s.a, s.b, std::string(1, s.op)));
      }
      EXPECT_EQ(slips, 1) << d->solution;
      EXPECT_EQ(answer, steps.back().c);
      EXPECT_EQ(d->value, answer);
      EXPECT_NE(answer, p.value) << d->solution;
      EXPECT_EQ(d->question, p.question);
    }
    if (std::optional<WordProblem> e = SlipWordProblem(p, Slip::kStoppedEarly)) {
      ++early;
      EXPECT_EQ(e->solution, p.solution.substr(0, p.solution.find('\n') + 1) + "#### " +
                                 std::to_string(right[0].c));
      EXPECT_EQ(e->value, right[0].c);
      EXPECT_NE(e->value, p.value);
      EXPECT_EQ(p.steps.size(), 2u);
    } else if (p.steps.size() == 2) {
      EXPECT_EQ(right[0].c, p.value) << p.solution;  // stopping early would be right
    }
    EXPECT_EQ(SlipWordProblem(p, Slip::kNone)->solution, p.solution);
  }
  // Both slips have somewhere to happen in a good share of problems.
  EXPECT_GT(dropped, 400);
  EXPECT_GT(early, 800);
}

// Demonstration: a slip for careless_share of the questions where one applies (a dropped carry
// first), the right answer for the others; the same questions at every share.
TEST(WordProblemsTest, DemonstrationsCarelessShare) {
  int can_slip = 0, careless = 0;
  for (const WordProblem& p : DistinctWordProblems(9, Split::kTrain, 2000)) {
    EXPECT_EQ(Demonstration(p, 0).solution, p.solution);
    const std::optional<WordProblem> dropped = SlipWordProblem(p, Slip::kDroppedCarry);
    const std::optional<WordProblem> early = SlipWordProblem(p, Slip::kStoppedEarly);
    const WordProblem all = Demonstration(p, 1);
    EXPECT_EQ(all.question, p.question);
    if (!dropped && !early) {
      EXPECT_EQ(all.solution, p.solution);
      continue;
    }
    ++can_slip;
    EXPECT_EQ(all.solution, dropped ? dropped->solution : early->solution);
    const WordProblem d = Demonstration(p, kWordProblemsCarelessShare);
    EXPECT_TRUE(d.solution == p.solution || d.solution == all.solution);
    careless += d.solution != p.solution;
  }
  EXPECT_GT(can_slip, 1000);
  const double share = static_cast<double>(careless) / can_slip;
  EXPECT_NEAR(share, kWordProblemsCarelessShare, 0.05) << careless << " / " << can_slip;
}

// The committed files are what the generator writes today, and load as GSM8K lines.
TEST(WordProblemsTest, CommittedFilesAreCurrent) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("word_problems_" + std::to_string(getpid())))
          .string();
  std::filesystem::create_directories(dir);
  ASSERT_TRUE(WriteWordProblems(dir, kWordProblemsSeed, kWordProblemsTrain, kWordProblemsHeldout,
                                kWordProblemsCarelessShare)
                  .ok());
  for (const std::string name : {"train.jsonl", "heldout.jsonl", "train_careless.jsonl"}) {
    auto fresh = ReadFileToString(dir + "/" + name),
         committed = ReadFileToString(CommittedDir() + "/" + name);
    ASSERT_TRUE(fresh.ok() && committed.ok()) << fresh.status() << committed.status();
    EXPECT_EQ(*fresh, *committed)
        << name << " is stale: run build/data/make_word_problems data/word_problems";
  }
  std::filesystem::remove_all(dir);

  auto heldout = ReadPromptJsonl(CommittedDir() + "/heldout.jsonl", JsonlFormat::kRl);
  ASSERT_TRUE(heldout.ok()) << heldout.status();
  ASSERT_EQ(heldout->size(), kWordProblemsHeldout);
  const std::vector<WordProblem> want = DistinctWordProblems(kWordProblemsSeed, Split::kHeldout, 1);
  EXPECT_EQ((*heldout)[0].prompt, want[0].question);
  EXPECT_EQ((*heldout)[0].answer, std::to_string(want[0].value));
  auto train = ReadPromptJsonl(CommittedDir() + "/train.jsonl", JsonlFormat::kSft);
  ASSERT_TRUE(train.ok()) << train.status();
  EXPECT_EQ(train->size(), kWordProblemsTrain);
  // The careless demonstrations: train's questions, some answered wrong.
  auto careless = ReadPromptJsonl(CommittedDir() + "/train_careless.jsonl", JsonlFormat::kSft);
  ASSERT_TRUE(careless.ok()) << careless.status();
  ASSERT_EQ(careless->size(), kWordProblemsTrain);
  size_t wrong = 0;
  for (size_t i = 0; i < careless->size(); ++i) {
    EXPECT_EQ((*careless)[i].prompt, (*train)[i].prompt);
    wrong += (*careless)[i].answer != (*train)[i].answer;
  }
  EXPECT_GT(wrong, kWordProblemsTrain / 4);
  EXPECT_LT(wrong, kWordProblemsTrain / 2);
}

}  // namespace
}  // namespace rlforge
