// An asynchronous GRPO job (configs/grpo_arith.yaml, shortened as tests/resume_test.cc does,
// with rollout.max_staleness 1 and checkpoint.every 2) SIGKILLed once a checkpoint is complete
// and resumed with `rlforge run --resume`: the checkpoint records the batch in flight, the
// resumed run deals it again with the same request ids, and every iteration trains exactly its
// own prompts' groups (request ids (it - 1) x prompts .. it x prompts - 1, each once), none lost
// or trained twice, with no token lagging by more than the bound. The kill lands wherever the
// job is after that checkpoint; the outcome does not depend on where.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "nlohmann/json.hpp"
#include "tests/job_process.h"

namespace rlforge::testing {
namespace {

constexpr int kIterations = 10;
constexpr int kPrompts = 4;

bool WaitForFile(const std::string& path, double timeout_s) {
  auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (std::chrono::steady_clock::now() < until) {
    if (std::filesystem::exists(path)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

TEST(AsyncResumeTest, AsyncGrpoKilledAndResumedLosesAndDuplicatesNoGroup) {
  const std::string root = FreshDir("async_resume");
  auto [sft_rc, sft] =
      RunRlforge({"run", SourceDir() + "/configs/sft_tiny.yaml", "job.run_root=" + root,
                  "job.name=sft", "sft.steps=4", "sft.eval_every=0", "sft.save_every=0"},
                 300);
  ASSERT_EQ(sft_rc, 0) << sft;
  const std::string run = root + "/killed";
  {
    JobProcess job({"run", SourceDir() + "/configs/grpo_arith.yaml", "job.run_root=" + root,
                    "job.name=killed", "model.path=" + root + "/sft/checkpoints/step_4",
                    "job.iterations=" + std::to_string(kIterations),
                    "grpo.prompts_per_iteration=" + std::to_string(kPrompts),
                    "grpo.eval_every=" + std::to_string(kIterations), "grpo.eval_examples=8",
                    "rollout.max_staleness=1", "checkpoint.every=2", "dashboard.enabled=false"},
                   root + "/killed.txt");
    ASSERT_TRUE(WaitForFile(run + "/checkpoints/step_2/state/manifest.json", 180)) << job.Output();
    job.Signal(SIGKILL);
    ASSERT_EQ(job.Wait(60).value_or(-1), 128 + SIGKILL) << job.Output();
  }
  ASSERT_LT(ReadMetricsJsonl(run).size(), static_cast<size_t>(kIterations) + 1)
      << "the job ended before it was killed";
  const nlohmann::json c =
      nlohmann::json::parse(ReadFile(run + "/checkpoints/step_2/state/controller.json"));
  ASSERT_TRUE(c.contains("rollout")) << c.dump();
  EXPECT_EQ(c["rollout"]["batches"][0]["batch"].get<int64_t>(), 3) << c.dump();
  EXPECT_EQ(c["rollout"]["batches"][0]["request_ids"], (nlohmann::json{8, 9, 10, 11}))
      << "batch 3, dealt while step 2 trained";

  auto [rc, out] = RunRlforge({"run", "--resume", run}, 300);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("batch(es) in flight dealt again"), std::string::npos) << out;
  const auto records = ReadMetricsJsonl(run);
  ASSERT_EQ(records.size(), static_cast<size_t>(kIterations) + 1);
  for (size_t r = 1; r < records.size(); ++r) {
    const auto& m = records[r]["metrics"];
    ASSERT_EQ(records[r]["step"].get<int64_t>(), static_cast<int64_t>(r));
    const double first = static_cast<double>((r - 1) * kPrompts);
    EXPECT_EQ(m["batch/groups"].get<double>(), kPrompts) << "step " << r;
    EXPECT_EQ(m["batch/request_id_first"].get<double>(), first) << "step " << r;
    EXPECT_EQ(m["batch/request_id_last"].get<double>(), first + kPrompts - 1) << "step " << r;
    EXPECT_LE(m["policy_version_lag"].get<double>(), 1) << "step " << r;
    EXPECT_EQ(m["stale_groups_discarded"].get<double>(), 0) << "step " << r;
  }
  EXPECT_TRUE(records.back()["metrics"].contains("heldout_accuracy"));
}

}  // namespace
}  // namespace rlforge::testing
