// Adds the language-model sections (model, data, sft) and their cross-field rules to the
// job schema.
#pragma once

#include "config/job_config.h"

namespace rlforge {

void AddLmSections(config::SchemaBuilder<JobConfig>& b);

}  // namespace rlforge
