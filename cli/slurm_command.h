// `rlforge slurm JOB.yaml [key=value ...] [--dry-run]`: the job as an sbatch script.
//
// job file + overrides (+ launch.backend=slurm) -> roles and placement -> nodes and GPUs per
// node -> sbatch script (printed with --dry-run) -> sbatch -> job id and run directory
#pragma once

#include <string>
#include <vector>

namespace rlforge {

// Returns the exit code: 0 submitted (or printed), 1 sbatch failed, 2 bad job or usage.
int RunSlurmCommand(const std::string& job_path, const std::vector<std::string>& overrides,
                    bool dry_run);

}  // namespace rlforge
