#include "controller/job_checkpoint.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "common/atomic_file.h"

namespace rlforge {
namespace {

namespace fs = std::filesystem;

std::string FreshRun(const std::string& name) {
  fs::path p = fs::temp_directory_path() / ("rlforge_ckpt_" + std::to_string(getpid())) / name;
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

// A checkpoint of `step` with one actor file, committed (or left torn: no manifest).
void Save(const std::string& run, int64_t step, bool commit, int64_t keep = 10) {
  const std::string dir = CheckpointStateDir(run, step);
  fs::create_directories(dir + "/trainer-0");
  std::ofstream(dir + "/trainer-0/learner.pt") << "bytes";
  if (commit) {
    ASSERT_TRUE(CommitCheckpoint(dir, step, "ppo", {{"iteration", step}}, keep).ok());
  }
}

TEST(JobCheckpointTest, NewestCompleteCheckpointWinsAndTornOnesAreNamed) {
  const std::string run = FreshRun("newest");
  Save(run, 2, true);
  Save(run, 4, true);
  Save(run, 6, false);
  std::vector<std::string> skipped;
  auto found = FindNewestCheckpoint(run, &skipped);
  ASSERT_TRUE(found.ok()) << found.status();
  ASSERT_TRUE(found->has_value());
  EXPECT_EQ((*found)->step, 4);
  EXPECT_EQ((*found)->dir, run + "/checkpoints/step_4/state");
  EXPECT_EQ((*found)->controller["iteration"], 4);
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_EQ(skipped[0], "checkpoint " + run +
                            "/checkpoints/step_6/state is incomplete (no manifest.json: the job "
                            "was stopped while writing it)");
}

TEST(JobCheckpointTest, AManifestOfAnotherStepOrFormatIsNotComplete) {
  const std::string run = FreshRun("manifest");
  Save(run, 3, true);
  Save(run, 5, true);
  ASSERT_TRUE(WriteFileAtomic(CheckpointStateDir(run, 5) + "/manifest.json",
                              R"({"format": "rlforge-job-checkpoint-v1", "step": 4})")
                  .ok());
  std::vector<std::string> skipped;
  auto found = FindNewestCheckpoint(run, &skipped);
  ASSERT_TRUE(found.ok() && found->has_value());
  EXPECT_EQ((*found)->step, 3);
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_NE(skipped[0].find("is not a rlforge-job-checkpoint-v1 manifest of step 5"),
            std::string::npos)
      << skipped[0];
}

// A file cut or lost after the manifest was written (a disk that lied about fsync, a hand
// edit) is not taken for a checkpoint: the manifest holds every file's size.
TEST(JobCheckpointTest, AFileOfAnotherSizeThanTheManifestsMakesItIncomplete) {
  const std::string run = FreshRun("sizes");
  Save(run, 3, true);
  Save(run, 5, true);
  std::ofstream(CheckpointStateDir(run, 5) + "/trainer-0/learner.pt") << "by";
  std::vector<std::string> skipped;
  auto found = FindNewestCheckpoint(run, &skipped);
  ASSERT_TRUE(found.ok() && found->has_value());
  EXPECT_EQ((*found)->step, 3);
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_EQ(skipped[0], "checkpoint " + CheckpointStateDir(run, 5) +
                            ": trainer-0/learner.pt holds 2 bytes; the manifest says 5");
  fs::remove(CheckpointStateDir(run, 3) + "/controller.json");
  skipped.clear();
  found = FindNewestCheckpoint(run, &skipped);
  ASSERT_TRUE(found.ok());
  EXPECT_FALSE(found->has_value());
  ASSERT_EQ(skipped.size(), 2u);
  EXPECT_EQ(skipped[1], "checkpoint " + CheckpointStateDir(run, 3) +
                            ": controller.json is missing (the manifest lists it)");
}

TEST(JobCheckpointTest, NoCheckpointAndHuggingFaceExportsAloneAreNotErrors) {
  const std::string run = FreshRun("none");
  fs::create_directories(run + "/checkpoints/step_9");  // an LmSave export: no state/
  std::ofstream(run + "/checkpoints/step_9/config.json") << "{}";
  std::vector<std::string> skipped;
  auto found = FindNewestCheckpoint(run, &skipped);
  ASSERT_TRUE(found.ok());
  EXPECT_FALSE(found->has_value());
  EXPECT_TRUE(skipped.empty());
}

TEST(JobCheckpointTest, CommitKeepsTheNewestAndLeavesExportsAlone) {
  const std::string run = FreshRun("keep");
  fs::create_directories(run + "/checkpoints/step_1");
  std::ofstream(run + "/checkpoints/step_1/model.safetensors") << "x";
  for (int64_t step : {1, 2, 3, 4}) Save(run, step, true, /*keep=*/2);
  EXPECT_FALSE(fs::exists(run + "/checkpoints/step_1/state"));
  EXPECT_TRUE(fs::exists(run + "/checkpoints/step_1/model.safetensors"));  // the export stays
  EXPECT_FALSE(fs::exists(run + "/checkpoints/step_2"));  // nothing else in it: gone
  EXPECT_TRUE(fs::exists(run + "/checkpoints/step_3/state/manifest.json"));
  EXPECT_TRUE(fs::exists(run + "/checkpoints/step_4/state/manifest.json"));
}

TEST(JobCheckpointTest, TruncateMetricsKeepsStepsUpToTheCheckpointAndDropsACutLine) {
  const std::string run = FreshRun("metrics");
  const std::string path = run + "/metrics.jsonl";
  std::ofstream(path) << R"({"step":0,"metrics":{"a":1}})"
                      << "\n"
                      << R"({"step":1,"metrics":{"a":2}})"
                      << "\n"
                      << R"({"step":2,"metrics":{"a":3}})"
                      << "\n"
                      << R"({"step":3,"metr)";
  ASSERT_TRUE(TruncateMetrics(path, 1).ok());
  auto text = ReadFileToString(path);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text, "{\"step\":0,\"metrics\":{\"a\":1}}\n{\"step\":1,\"metrics\":{\"a\":2}}\n");
  ASSERT_TRUE(TruncateMetrics(path, -1).ok());
  EXPECT_EQ(*ReadFileToString(path), "");
}

}  // namespace
}  // namespace rlforge
