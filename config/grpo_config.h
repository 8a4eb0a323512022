// Adds the `grpo:` section (see grpo_options.h) to the job schema.
#pragma once

#include "config/job_config.h"

namespace rlforge {

void AddGrpoSection(config::SchemaBuilder<JobConfig>& b);

}  // namespace rlforge
