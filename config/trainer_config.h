// The `trainer:` section (ranks, threads, AdamW and its schedule, sharding, device) and the
// rules on where the algorithm's trainer can run.
#pragma once

#include <memory>

#include "config/job_config.h"

namespace rlforge {

std::shared_ptr<const config::Schema> TrainerSection();
// trainer.ranks, trainer.device and trainer.lora against what the algorithm trains and where
// ranks can run.
void CheckTrainerPlacement(const JobConfig& c, config::CheckContext& ctx);

}  // namespace rlforge
