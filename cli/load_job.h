// Loading a job file for a command: every problem printed, as `rlforge validate` prints them.
#pragma once

#include <string>
#include <vector>

#include "config/job_config.h"

namespace rlforge {

// Loads and validates `path` with `overrides`, then `checks` (SetupChecks() where the job is run
// or validated on this host); prints every problem to stderr. False on errors.
bool LoadOrReport(const std::string& path, const std::vector<std::string>& overrides,
                  LoadedJob* out, const std::vector<JobCheck>& checks = {});

}  // namespace rlforge
