#include "data/word_problems.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

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

// Every step "A op B = C" is recomputed, and the final "#### N" is the last step's result.
TEST(WordProblemsTest, AnswersRecompute) {
  const std::regex step(R"((\d+) ([-+*/]) (\d+) = (\d+))");
  std::set<std::string> kinds;
  for (uint64_t i = 0; i < 2000; ++i) {
    const WordProblem p = MakeWordProblem(3, i % 2 ? Split::kTrain : Split::kHeldout, i);
    kinds.insert(p.kind);
    std::istringstream lines(p.solution);
    std::string line;
    int64_t last = -1, steps = 0;
    while (std::getline(lines, line) && line.rfind("####", 0) != 0) {
      std::smatch m;
      ASSERT_TRUE(std::regex_search(line, m, step)) << p.solution;
      const int64_t a = std::stoll(m[1]), b = std::stoll(m[3]), c = std::stoll(m[4]);
      const char op = m[2].str()[0];
      if (op == '/') {
        EXPECT_EQ(a % b, 0) << line;
      }
      EXPECT_EQ(op == '+' ? a + b : op == '-' ? a - b : op == '*' ? a * b : a / b, c) << line;
      last = c;
      ++steps;
    }
    EXPECT_TRUE(steps == 1 || steps == 2) << p.solution;
    EXPECT_EQ(line, "#### " + std::to_string(last)) << p.solution;
    EXPECT_EQ(p.value, last);
    EXPECT_GE(p.value, 0);
  }
  EXPECT_EQ(kinds.size(), 9u);  // every template
}

// The committed files are what the generator writes today, and load as GSM8K lines.
TEST(WordProblemsTest, CommittedFilesAreCurrent) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("word_problems_" + std::to_string(getpid())))
          .string();
  std::filesystem::create_directories(dir);
  ASSERT_TRUE(
      WriteWordProblems(dir, kWordProblemsSeed, kWordProblemsTrain, kWordProblemsHeldout).ok());
  for (const std::string name : {"train.jsonl", "heldout.jsonl"}) {
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
}

}  // namespace
}  // namespace rlforge
