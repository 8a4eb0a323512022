// Learning-rate schedules shared by every learner: linear warm-up, then
// constant, linear or cosine decay to min_lr_ratio * lr over total_steps.
#pragma once

#include <cstdint>

#include "config/job_config.h"

namespace rlforge {

// `step` counts from 0; total_steps is the schedule's length (> 0).
double ScheduledLearningRate(const TrainerOptions& o, int64_t step, int64_t total_steps);

}  // namespace rlforge
