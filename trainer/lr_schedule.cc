#include "trainer/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace rlforge {

double ScheduledLearningRate(const TrainerOptions& o, int64_t step, int64_t total_steps) {
  if (o.warmup_steps > 0 && step < o.warmup_steps) {
    return o.lr * static_cast<double>(step + 1) / static_cast<double>(o.warmup_steps);
  }
  if (o.lr_schedule == LrSchedule::kConstant) return o.lr;
  int64_t span = std::max<int64_t>(1, total_steps - o.warmup_steps);
  double progress =
      std::clamp(static_cast<double>(step - o.warmup_steps) / static_cast<double>(span), 0.0, 1.0);
  double floor = o.min_lr_ratio * o.lr;
  switch (o.lr_schedule) {
    case LrSchedule::kLinear:
      return floor + (o.lr - floor) * (1.0 - progress);
    case LrSchedule::kCosine:
    case LrSchedule::kConstant:  // returned above
      break;
  }
  return floor + (o.lr - floor) * 0.5 * (1.0 + std::cos(M_PI * progress));
}

}  // namespace rlforge
