// `rlforge slurm --dry-run` and `launch.backend: slurm` without Slurm: the script follows the
// placement, and what cannot work says why (tests/slurm_test.py runs a real Slurm).
#include <gtest/gtest.h>

#include <cstdlib>

#include "tests/job_process.h"

namespace rlforge::testing {
namespace {

std::string PpoJob() { return SourceDir() + "/configs/ppo_cartpole.yaml"; }

TEST(SlurmCommandTest, DryRunPrintsAScriptSizedByThePlacement) {
  // Four workers at two per node need two nodes; each node holds two 1-GPU workers.
  auto [code, out] =
      RunRlforge({"slurm", PpoJob(), "rollout.workers=4", "launch.placement.rollout.per_node=2",
                  "launch.placement.rollout.gpus=1", "--dry-run"});
  ASSERT_EQ(code, 0) << out;
  for (const char* line :
       {"#SBATCH --job-name=ppo_cartpole\n", "#SBATCH --nodes=2\n", "#SBATCH --gres=gpu:2\n",
        "'rollout.workers=4' 'launch.placement.rollout.per_node=2' "
        "'launch.placement.rollout.gpus=1' 'launch.backend=slurm' "
        "'job.name=ppo_cartpole-'\"$SLURM_JOB_ID\"\n"}) {
    EXPECT_NE(out.find(line), std::string::npos) << line << "\n" << out;
  }
}

TEST(SlurmCommandTest, TooFewNodesForThePlacementIsAnError) {
  auto [code, out] = RunRlforge({"slurm", PpoJob(), "rollout.workers=4", "launch.nodes=1",
                                 "launch.placement.rollout.per_node=2", "--dry-run"});
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("launch.nodes: 1 is fewer than the 2 nodes launch.placement needs"),
            std::string::npos)
      << out;
}

TEST(SlurmCommandTest, WorkersThatDoNotFitTheirNodesFailBeforeSubmission) {
  auto [code, out] =
      RunRlforge({"slurm", PpoJob(), "rollout.workers=5", "launch.placement.rollout.nodes=[1]",
                  "launch.placement.rollout.per_node=2", "--dry-run"});
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("launch.placement.rollout: 5 workers do not fit on nodes [1] at per_node 2"),
            std::string::npos)
      << out;
}

TEST(SlurmCommandTest, PlacementOfARoleThatPpoDoesNotStartIsAnError) {
  auto [code, out] =
      RunRlforge({"slurm", PpoJob(), "launch.placement.reward.per_node=1", "--dry-run"});
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("launch.placement.reward: job.algorithm ppo launches no reward actors"),
            std::string::npos)
      << out;
}

TEST(SlurmCommandTest, SlurmBackendOutsideAnAllocationSaysSo) {
  unsetenv("SLURM_JOB_NODELIST");  // the child inherits this environment
  const std::string root = FreshDir("slurm_outside");
  auto [code, out] =
      RunRlforge({"run", PpoJob(), "launch.backend=slurm", "job.run_root=" + root, "job.name=x"});
  EXPECT_EQ(code, 1) << out;
  EXPECT_NE(out.find("launch.backend slurm: this is not inside a Slurm allocation "
                     "(SLURM_JOB_NODELIST is not set)"),
            std::string::npos)
      << out;
  EXPECT_NE(ReadFile(root + "/x/status.json").find("\"failed\""), std::string::npos);
}

}  // namespace
}  // namespace rlforge::testing
