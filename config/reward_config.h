// Adds the `reward` section and its cross-key rules to the job schema.
#pragma once

#include "config/job_config.h"

namespace rlforge {

void AddRewardSections(config::SchemaBuilder<JobConfig>& b);

}  // namespace rlforge
