// Adds the `engine:` section (see engine_options.h) to the job schema.
#pragma once

#include "config/job_config.h"

namespace rlforge {

void AddEngineSection(config::SchemaBuilder<JobConfig>& b);

}  // namespace rlforge
