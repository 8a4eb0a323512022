// The `python` reward: a function in the user's Python file, with verl's signature
// (compute_score(data_source, solution_str, ground_truth, extra_info)) or TRL's
// (reward_func(prompts, completions, **kwargs) -> list of floats), run by a pool of Python
// processes (the user's interpreter or venv) behind the reward worker.
//
// start: `workers` processes of `python -c <reward/python_runner.py> FILE FUNCTION`, each
//        importing the module once; an import error stops the start with FILE:LINE
// batch: samples dealt to idle processes, one at a time each, in parallel; a sample past
//        `timeout_s` is a timeout (its process killed and started again), a process that dies
//        fails its sample (and is started again), an exception fails its sample, NaN or a
//        wrong type is reported as such: never the job, never a score of 0
// logs:  the processes' stdout and stderr go to the reward worker's stderr (its log)
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "reward/reward.h"

namespace rlforge::reward {

struct PythonRewardOptions {
  std::string path;      // the user's .py file
  std::string function;  // the function's name in it
  std::string python = "/usr/bin/python3";
  int workers = 2;
  double timeout_s = 10;        // per sample
  double start_timeout_s = 60;  // per process start (the module's import)
};

absl::StatusOr<std::shared_ptr<const Reward>> MakePythonReward(const PythonRewardOptions& options);

}  // namespace rlforge::reward
