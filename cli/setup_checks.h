// What the actors' set-up will check, checked before anything starts: `rlforge validate`,
// `rlforge run` and `rlforge controller` load every job through these (cli/load_job.h), so they
// refuse the same files, each error naming file, line and key, exit code 2.
//
// job file -> LoadJobFile(schema rules, then these) -> errors | a job to run
//
// config/ sits below reward/ and sim_bridge/, so these checks live here and are passed down
// (JobCheck): a reward's regex compiles (reward::CheckRewardSpec), a plugin file is there (not
// loaded: its code runs in reward workers only), env.id is a built-in env (with a did-you-mean)
// when the job steps built-in envs, model.path holds a checkpoint's files (config.json, the
// safetensors or the shards its index lists, tokenizer.json) unless model.init_job writes it, and
// data.source jsonl's files exist, and the resolved weight transport fits the job
// (CheckWeightTransport, weights/weight_transport.h). Relative paths are relative to the
// working directory, which the
// workers `rlforge run` starts share. Files on this host are not checked under launch.backend
// kubernetes (every role joins from a host of its own), nor a plugin for reward.external workers.
// Whatever only a worker can find (a plugin that does not load, a checkpoint that does not parse)
// it reports at set-up, and the job stops naming it (docs/fault_tolerance.md).
#pragma once

#include <vector>

#include "config/job_config.h"

namespace rlforge {

std::vector<JobCheck> SetupChecks();

}  // namespace rlforge
