// The job-file sections about what runs and how the controller serves it: job, controller,
// checkpoint and echo (the transport self-test), and their cross-field rules.
#pragma once

#include <memory>

#include "config/job_config.h"

namespace rlforge {

std::shared_ptr<const config::Schema> JobSection();
std::shared_ptr<const config::Schema> ControllerSection();
std::shared_ptr<const config::Schema> CheckpointSection();
std::shared_ptr<const config::Schema> EchoSection();
// controller.keys against controller.security, checkpoint.every against the algorithm and
// asynchronous rollout, the echo job's actors and payload.
void CheckRunKeys(const JobConfig& c, config::CheckContext& ctx);

}  // namespace rlforge
