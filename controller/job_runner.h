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
};

// Exit codes: 0 finished, 1 failed, 128+N stopped by signal N.
int RunJob(const JobConfig& config, const RunOptions& options);

}  // namespace rlforge
