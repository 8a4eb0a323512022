// The README's main job, configs/grpo_arith.yaml, losing its only rollout engine (issue 42).
// Only its length is shortened (iterations, batch sizes, and a seconds-long SFT stage as the
// starting checkpoint, as tests/grpo_test.cc does); the weight transport and every fault
// setting keep their defaults, so the weights travel through the shared-memory
// ring (weights.transport auto, one host). The engine is SIGKILLed in one run and SIGSTOPped
// in another once the job is under way (a metrics record is written): the job replaces it,
// streams the current version to the replacement, and finishes with every batch whole.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "tests/job_process.h"

namespace rlforge::testing {
namespace {

constexpr int kIterations = 60;
constexpr int kPrompts = 4;

class EngineLossTest : public ::testing::Test {
 protected:
  // Runs configs/grpo_arith.yaml, shortened, and sends `sig` to its only engine once step 0
  // (the start's evaluation) and iteration 1 are recorded; the job must finish by itself.
  void RunWithTheEngineSignalled(int sig, const std::string& name) {
    // The seconds-long SFT stage of configs/sft_tiny.yaml: the starting checkpoint.
    const std::string root = FreshDir("engine_loss_" + name);
    auto [code, sft] =
        RunRlforge({"run", SourceDir() + "/configs/sft_tiny.yaml", "job.run_root=" + root,
                    "job.name=sft", "sft.steps=4", "sft.eval_every=0", "sft.save_every=0"},
                   300);
    ASSERT_EQ(code, 0) << sft;
    const std::string run = root + "/" + name;
    JobProcess job({"run", SourceDir() + "/configs/grpo_arith.yaml", "job.run_root=" + root,
                    "job.name=" + name, "model.path=" + root + "/sft/checkpoints/step_4",
                    "job.iterations=" + std::to_string(kIterations),
                    "grpo.prompts_per_iteration=" + std::to_string(kPrompts), "grpo.group_size=4",
                    "grpo.eval_every=" + std::to_string(kIterations), "grpo.eval_examples=16"},
                   root + "/" + name + ".txt");
    ASSERT_TRUE(WaitForMetrics(run, 2, 120)) << job.Output();
    const std::string out = job.Output();
    ASSERT_NE(ReadFile(run + "/logs/controller.log").find("reach the engines via shm-ring:"),
              std::string::npos)
        << "the default transport on one host is the ring";
    const int pid = StartedPid(out, "rollout-0");
    ASSERT_GT(pid, 0) << out;
    ASSERT_EQ(kill(pid, sig), 0);
    ASSERT_EQ(job.Wait(180).value_or(-1), 0) << job.Output();

    const std::vector<std::string> events = ReadEvents(run);
    for (const char* want : {"lost rollout-0", "restart rollout-0", "rejoined rollout-0"}) {
      EXPECT_NE(std::find(events.begin(), events.end(), want), events.end())
          << want << " is not in events.jsonl:\n"
          << ReadFile(run + "/events.jsonl");
    }
    const auto records = ReadMetricsJsonl(run);
    ASSERT_EQ(records.size(), static_cast<size_t>(kIterations) + 1) << job.Output();
    for (size_t r = 1; r < records.size(); ++r) {
      const auto& m = records[r]["metrics"];
      EXPECT_EQ(records[r]["step"].get<int64_t>(), static_cast<int64_t>(r));
      EXPECT_EQ(m["groups"].get<double>(), kPrompts) << "step " << r;  // every prompt's group
      EXPECT_EQ(m["policy_version_lag"].get<double>(), 0) << "step " << r;
    }
    const auto& last = records.back()["metrics"];
    EXPECT_EQ(last["faults/actors_lost"].get<double>(), 1) << ReadFile(run + "/events.jsonl");
    EXPECT_EQ(last["faults/restarts"].get<double>(), 1);
    EXPECT_TRUE(last.contains("heldout_accuracy"));
    EXPECT_EQ(job.Output().find("new engines wait for the next version"), std::string::npos);
  }
};

TEST_F(EngineLossTest, GrpoArithSurvivesItsOnlyEngineKilled) {
  RunWithTheEngineSignalled(SIGKILL, "killed");
}

// A stopped engine sends no heartbeats: declared lost after 2.5 s (the defaults), killed, and
// replaced as a killed one is.
TEST_F(EngineLossTest, GrpoArithSurvivesItsOnlyEngineStopped) {
  RunWithTheEngineSignalled(SIGSTOP, "stopped");
}

}  // namespace
}  // namespace rlforge::testing
