// Rules on a language-model job's weight stream (weights.transport, weights.apply,
// weights.dtype) against where its trainer and engines run.
#pragma once

#include "config/job_config.h"

namespace rlforge {

// weights.apply mapped and the device transports (cuda_ipc, nccl) against the job's devices,
// hosts and build.
void CheckLmWeights(const JobConfig& c, config::CheckContext& ctx);

}  // namespace rlforge
