#include "config/lm_weights_config.h"

#include "absl/strings/str_cat.h"
#include "config/device.h"

namespace rlforge {

namespace {

// weights.apply: mapped serves the engines' fp32 parameters from a segment on the trainer's host.
void CheckMappedWeights(const JobConfig& c, config::CheckContext& ctx) {
  if (c.weights.apply != WeightApply::kMapped) return;
  if (c.weights.dtype != FloatDtype::kFloat32) {
    ctx.Error(
        "weights.dtype",
        absl::StrCat("weights.apply mapped serves the engines' fp32 parameters from the "
                     "stream's own bytes; got ",
                     ChoiceName(c.weights.dtype), " (use float32, or weights.apply in_place)"));
  }
  if (c.engine.device != "cpu") {
    ctx.Error("weights.apply",
              absl::StrCat("mapped makes the shared-memory stream the engines' own parameters, "
                           "which a GPU cannot compute on; engine.device is ",
                           c.engine.device, " (use weights.apply in_place or staged)"));
  }
}

}  // namespace

void CheckLmWeights(const JobConfig& c, config::CheckContext& ctx) {
  if (c.job.algorithm == nullptr || !c.job.algorithm->lm_engines) return;
  CheckMappedWeights(c, ctx);  // the transport's own checks: weights/weight_transport.h
}

}  // namespace rlforge
