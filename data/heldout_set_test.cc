#include "data/heldout_set.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "data/arith_task.h"

namespace rlforge {
namespace {

TEST(HeldoutSetTest, ArithmeticIsTheTasksHeldOutSplitForTheSeed) {
  DataOptions d;
  d.max_digits = 2;
  d.ops = {"+"};
  auto got = HeldoutExamples(d, 3, 40, JsonlFormat::kRl);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), 40u);
  auto task = ArithmeticTaskFor(d);
  ASSERT_TRUE(task.ok());
  const std::vector<PromptExample> want = task->Examples(3, Split::kHeldout, 0, 40);
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ((*got)[i].prompt, want[i].prompt) << i;
    EXPECT_EQ((*got)[i].answer, want[i].answer) << i;
    // Held out by the task's own test, not a prefix of the training stream.
    EXPECT_TRUE(task->IsHeldout((*got)[i].prompt.substr(0, (*got)[i].prompt.size() - 1)));
  }
  // A shorter set is a prefix of a longer one (so --limit and eval_examples agree).
  auto first = HeldoutExamples(d, 3, 10, JsonlFormat::kRl);
  ASSERT_TRUE(first.ok());
  for (size_t i = 0; i < first->size(); ++i) EXPECT_EQ((*first)[i].prompt, want[i].prompt);
  EXPECT_EQ(HeldoutSource(d, 3), "the arithmetic task's held-out split (job.seed 3)");
}

TEST(HeldoutSetTest, JsonlIsTheFilesFirstLines) {
  const std::string path = ::testing::TempDir() + "/heldout_set_" + std::to_string(getpid());
  {
    std::ofstream out(path);
    for (int i = 0; i < 5; ++i) {
      out << "{\"prompt\": \"" << i << "+1=\", \"answer\": \"" << i + 1 << "\"}\n";
    }
  }
  DataOptions d;
  d.source = DataSource::kJsonl;
  d.heldout_path = path;
  auto three = HeldoutExamples(d, 1, 3, JsonlFormat::kRl);
  ASSERT_TRUE(three.ok()) << three.status();
  ASSERT_EQ(three->size(), 3u);
  EXPECT_EQ((*three)[2].prompt, "2+1=");
  auto all = HeldoutExamples(d, 1, 100, JsonlFormat::kRl);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->size(), 5u);
  EXPECT_EQ(HeldoutSource(d, 1), path);
  std::remove(path.c_str());
  auto missing = HeldoutExamples(d, 1, 3, JsonlFormat::kRl);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(std::string(missing.status().message()).find(path), std::string::npos);
}

TEST(HeldoutSetTest, AnArithmeticTaskItCannotMakeIsAnErrorNamingTheOption) {
  DataOptions d;
  d.ops = {"^"};
  auto got = HeldoutExamples(d, 1, 3, JsonlFormat::kRl);
  ASSERT_FALSE(got.ok());
  EXPECT_NE(std::string(got.status().message()).find("op '^'"), std::string::npos) << got.status();
}

}  // namespace
}  // namespace rlforge
