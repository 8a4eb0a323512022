// Adds the control-policy sections (env, sim, rollout, policy, ppo, weights)
// and their cross-field rules to the job schema.
#pragma once

#include "config/job_config.h"

namespace rlforge {

void AddControlSections(config::SchemaBuilder<JobConfig>& b);

}  // namespace rlforge
