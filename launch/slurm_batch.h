// `rlforge slurm`: a job as an sbatch script, and its submission.
//
// job (name, nodes, GPUs per node, the `rlforge run` command) -> sbatch script -> sbatch
//   -> Slurm job id; the run directory is <run_root>/<name>-<job id>
//
// The script allocates the nodes and runs `rlforge run` on the first of them with
// launch.backend=slurm, which starts every actor as a step of the allocation.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace rlforge {

struct BatchJob {
  std::string name;              // Slurm's job name and the run's job.name prefix
  int nodes = 1;                 // --nodes
  int64_t gpus_per_node = 0;     // --gres=gpu:N when > 0
  std::string workdir;           // --chdir: relative paths in the job resolve here
  std::string run_root;          // absolute; holds the run directory and the output
  std::vector<std::string> run;  // rlforge run JOB.yaml [key=value ...] (absolute rlforge)
};

// The script's text. Every argument is single-quoted for the shell.
std::string SbatchScript(const BatchJob& job);

// <run_root>/<name>-<job id>: where the run directory of the submitted job will be.
std::string BatchRunDirectory(const BatchJob& job, const std::string& slurm_job_id);

// Submits the script file with `sbatch --parsable`; returns the Slurm job id.
absl::StatusOr<std::string> SubmitBatch(const std::string& script_path, double timeout_s);

}  // namespace rlforge
