#include "launch/slurm_batch.h"

#include <gtest/gtest.h>

namespace rlforge {
namespace {

BatchJob Job() {
  BatchJob j;
  j.name = "ppo_cartpole";
  j.nodes = 2;
  j.workdir = "/home/u/rl";
  j.run_root = "/home/u/rl/runs";
  j.run = {"/opt/rlforge/rlforge", "run", "/home/u/rl/job.yaml", "rollout.workers=2",
           "launch.backend=slurm"};
  return j;
}

TEST(SlurmBatchTest, ScriptAllocatesTheNodesAndRunsTheJobUnderSlurm) {
  std::string s = SbatchScript(Job());
  EXPECT_EQ(s.rfind("#!/bin/bash\n", 0), 0u);
  EXPECT_NE(s.find("#SBATCH --job-name=ppo_cartpole\n"), std::string::npos);
  EXPECT_NE(s.find("#SBATCH --nodes=2\n"), std::string::npos);
  EXPECT_NE(s.find("#SBATCH --chdir=/home/u/rl\n"), std::string::npos);
  EXPECT_NE(s.find("#SBATCH --output=/home/u/rl/runs/ppo_cartpole-%j.out\n"), std::string::npos);
  EXPECT_EQ(s.find("--gres"), std::string::npos);
  EXPECT_NE(s.find("\nexec '/opt/rlforge/rlforge' 'run' '/home/u/rl/job.yaml' "
                   "'rollout.workers=2' 'launch.backend=slurm' "
                   "'job.name=ppo_cartpole-'\"$SLURM_JOB_ID\"\n"),
            std::string::npos)
      << s;
  EXPECT_EQ(BatchRunDirectory(Job(), "42"), "/home/u/rl/runs/ppo_cartpole-42");
}

TEST(SlurmBatchTest, GpusAndQuotesReachTheScript) {
  BatchJob j = Job();
  j.gpus_per_node = 4;
  j.run.push_back("data.prompt=it's");
  std::string s = SbatchScript(j);
  EXPECT_NE(s.find("#SBATCH --gres=gpu:4\n"), std::string::npos);
  EXPECT_NE(s.find(" 'data.prompt=it'\\''s' "), std::string::npos) << s;
}

}  // namespace
}  // namespace rlforge
