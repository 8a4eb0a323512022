// Rules on the job's worker fleets: rollout and reward worker counts, the caps and minimums of
// elastic jobs (workers that join and leave a running job), language-model engine limits.
#pragma once

#include "config/job_config.h"

namespace rlforge {

// rollout and reward worker counts, caps and minimums against what the job takes.
void CheckWorkerFleets(const JobConfig& c, config::CheckContext& ctx);
// rollout.workers of a language-model job within the engines it can hold.
void CheckLmEngineCount(const JobConfig& c, config::CheckContext& ctx);

}  // namespace rlforge
