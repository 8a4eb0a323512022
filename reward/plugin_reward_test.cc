#include "reward/plugin_reward.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>

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

// issue 42: a relative plugin path meant one file to `rlforge validate` and another to the
// worker's dlopen(), which searches the library path for a bare name. Both now resolve it
// against the working directory, through PluginFile.
TEST(PluginRewardTest, RelativePathIsAFileInTheWorkingDirectory) {
  const std::string cwd = std::filesystem::current_path().string();
  EXPECT_EQ(PluginFile("libx.so"), cwd + "/libx.so");
  EXPECT_EQ(PluginFile("./a/../libx.so"), cwd + "/libx.so");
  EXPECT_EQ(PluginFile("/opt/libx.so"), "/opt/libx.so");
  // libm is in the library path, not in the working directory: not loaded.
  auto r = LoadPluginReward("libm.so.6", {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("cannot load"), std::string::npos) << r.status();
  // The built example by a path relative to the working directory: found and loaded.
  const std::string relative = std::filesystem::relative(RLFORGE_KEYWORD_PLUGIN).string();
  ASSERT_NE(relative.front(), '/');
  EXPECT_TRUE(LoadPluginReward(relative, {"keyword=x"}).ok());
  RewardSpec spec;
  spec.kind = RewardKind::kPlugin;
  spec.params.path = relative;
  EXPECT_TRUE(CheckRewardSpec(spec).empty());
  spec.params.path = "libm.so.6";
  const auto problems = CheckRewardSpec(spec);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0].key, "params.path");
  EXPECT_EQ(problems[0].message,
            "no file 'libm.so.6' (relative to the working directory: " + cwd + "/libm.so.6)");
}

// A pattern CheckRewardSpec passes builds, and one it refuses does not build, with one message.
TEST(PluginRewardTest, RegexCheckAgreesWithBuilding) {
  for (const char* pattern : {"^a+$", "(ab", "[z-a]", "\\p{L}+"}) {
    for (bool full : {false, true}) {
      RewardSpec spec;
      spec.kind = RewardKind::kRegexFormat;
      spec.params.pattern = pattern;
      spec.params.full_match = full;
      const auto problems = CheckRewardSpec(spec);
      const auto built = BuildReward(spec, 1);
      EXPECT_EQ(problems.empty(), built.ok()) << pattern << " " << full;
      if (!problems.empty()) {
        EXPECT_EQ(problems[0].key, "params.pattern");
        EXPECT_NE(problems[0].message.find(std::string("regex '") + pattern + "' does not compile"),
                  std::string::npos)
            << problems[0].message;
      }
    }
  }
}

}  // namespace
}  // namespace rlforge::reward
