// The `launch:` section (how actor processes start: local, Slurm steps, or Kubernetes pods that
// join) and the rules each backend imposes on the rest of the job.
#pragma once

#include <memory>

#include "config/job_config.h"

namespace rlforge {

std::shared_ptr<const config::Schema> LaunchSection();
// Keys only one backend reads, and settings that cannot work where its actors run.
void CheckLaunch(const JobConfig& c, config::CheckContext& ctx);
// What the backend implies, stated in the resolved config every actor reads: under Kubernetes
// every role read is external; under Slurm the controller binds every address.
void ApplyLaunchDefaults(JobConfig& c);

}  // namespace rlforge
