// End-to-end GRPO jobs through the rlforge binary: a seconds-long SFT stage makes the
// starting checkpoint, then configs/grpo_arith.yaml runs a few iterations on it with
// the trainer, the rollout engine and a reward worker as separate processes.
#include <gtest/gtest.h>


#include "nlohmann/json.hpp"
#include "tests/job_process.h"

namespace rlforge::testing {
namespace {

std::string Grpo() { return SourceDir() + "/configs/grpo_arith.yaml"; }

// The SFT stage both tests start from (4 optimiser steps of configs/sft_tiny.yaml).
std::string SftCheckpoint(const std::string& root) {
  auto [code, out] =
      RunRlforge({"run", SourceDir() + "/configs/sft_tiny.yaml", "job.run_root=" + root,
                  "job.name=sft", "sft.steps=4", "sft.eval_every=0", "sft.save_every=0"},
                 300);
  EXPECT_EQ(code, 0) << out;
  return root + "/sft/checkpoints/step_4";
}

TEST(GrpoTest, ArithJobGeneratesScoresTrainsAndSyncsWeightsEveryIteration) {
  std::string root = FreshDir("grpo_arith");
  const std::string base = SftCheckpoint(root);
  auto [code, out] = RunRlforge(
      {"run", Grpo(), "job.run_root=" + root, "job.name=g", "model.path=" + base,
       "job.iterations=3", "grpo.prompts_per_iteration=4", "grpo.group_size=4",
       "grpo.eval_every=2", "grpo.eval_examples=8", "trainer.lr=1e-3"},
      300);
  ASSERT_EQ(code, 0) << out;
  auto m = ReadMetricsJsonl(root + "/g");
  ASSERT_EQ(m.size(), 4u) << out;  // the start evaluation, then 3 iterations
  for (int step : {0, 2, 3}) {
    const auto& r = m[step]["metrics"];
    ASSERT_TRUE(r.contains("heldout_accuracy")) << "step " << step;
    EXPECT_GE(r["heldout_accuracy"].get<double>(), 0.0);
    EXPECT_LE(r["heldout_accuracy"].get<double>(), 1.0);
    EXPECT_EQ(r["heldout_examples"].get<double>(), 8);
  }
  EXPECT_FALSE(m[1]["metrics"].contains("heldout_accuracy"));
  for (int step = 1; step <= 3; ++step) {
    const auto& r = m[step]["metrics"];
    const auto& t = m[step]["timings"];
    EXPECT_EQ(m[step]["step"].get<int>(), step);
    EXPECT_EQ(r["groups"].get<double>(), 4);
    // Rewards are exact-match 0/1, reported under the reward's own name.
    const double reward = r["reward/exact/mean"].get<double>();
    EXPECT_GE(reward, 0.0);
    EXPECT_LE(reward, 1.0);
    EXPECT_DOUBLE_EQ(r["reward_mean"].get<double>(), reward);
    // Synchronous GRPO: every sample comes from the trainer's current version.
    EXPECT_EQ(r["policy_version_lag"].get<double>(), 0);
    // Degenerate groups (all rewards equal) make no update and keep the version.
    EXPECT_LE(r["policy_version"].get<double>(), step);
    // The trainer recomputes the engine's logprobs of the sampled tokens with the same
    // weights: they agree to float32 noise.
    EXPECT_LT(r["logprob_mismatch_max"].get<double>(), 1e-3) << out;
    EXPECT_GT(r["response_length"].get<double>(), 0);
    EXPECT_LE(r["response_length"].get<double>(), 6);
    for (const char* k : {"generate_s", "reward_s", "train_s", "weight_sync_s", "iteration_s"}) {
      EXPECT_TRUE(t.contains(k)) << k << " at step " << step;
    }
  }
}

TEST(GrpoTest, MissingStartingCheckpointIsAClearError) {
  std::string root = FreshDir("grpo_nopath");
  auto [code, out] = RunRlforge({"run", Grpo(), "job.run_root=" + root, "job.name=g",
                                 "model.path=" + root + "/no/such/checkpoint",
                                 "job.iterations=1"},
                                120);
  EXPECT_NE(code, 0) << out;
  // Refused before any actor starts, so no actor reports it first in other words.
  EXPECT_NE(out.find("model.path: '" + root + "/no/such/checkpoint' is not a checkpoint directory"),
            std::string::npos)
      << out;
  EXPECT_EQ(out.find("started trainer-0"), std::string::npos) << out;
}

}  // namespace
}  // namespace rlforge::testing
