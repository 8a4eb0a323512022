// RunJob: `rlforge run` after the config is loaded.
//
// run dir + resolved config -> bind controller socket -> launch actors ->
// wait for registration -> Algorithm::Run -> shutdown -> status.json
//
// Never throws and never exits the process; returns the exit code.
#pragma once

#include <atomic>
#include <string>

#include "config/job_config.h"

namespace rlforge {

struct RunOptions {
  std::string self_exe;                    // the rlforge binary, used to start actors
  const std::atomic<int>* stop = nullptr;  // signal number once one arrives
  bool interactive = false;                // stdout is a terminal
  // How many SIGINT/SIGTERM came: with checkpoint.every set the first lets the iteration under
  // way finish and checkpoint, the second stops at once. Null: every signal stops at once.
  const std::atomic<int>* signals = nullptr;
  // `rlforge run --resume`: continue the run in this directory from its newest complete
  // checkpoint (controller/job_checkpoint.h) instead of making a new one.
  std::string resume_dir;
};

// Whether the job starts rlforge-store: several trainer ranks meet there, and so do trainer
// rank 0 and the engines of a language-model job whose weights travel by gloo or nccl broadcast.
bool NeedsTrainerStore(const JobConfig& config, int trainer_ranks);

// Exit codes: 0 finished, 1 failed, 128+N stopped by signal N.
int RunJob(const JobConfig& config, const RunOptions& options);

}  // namespace rlforge
