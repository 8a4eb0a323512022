// Rules on a language-model job's weight stream (weights.apply, weights.dtype) against where its
// engines run.
#pragma once

#include "config/job_config.h"

namespace rlforge {

// weights.apply mapped against the job's dtype and engine device. What the transport itself
// needs (hosts, devices, build) is checked where it is resolved: weights/weight_transport.h.
void CheckLmWeights(const JobConfig& c, config::CheckContext& ctx);

}  // namespace rlforge
