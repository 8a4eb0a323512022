// GrpoAlgorithm: GRPO for a language model on a verifiable task.
//
// per iteration: train prompts -> rollout (LmGenerate, groups stream back in chunks) ->
//   reward workers score each chunk as it arrives -> trainer (GrpoTrain: group advantages,
//   clipped loss, AdamW) -> WeightsReady -> rollout loads version v+1
// every grpo.eval_every iterations (and before the first, after the last): greedy answers
//   to held-out prompts -> heldout_accuracy (exact match)
//
// Synchronous: rollout always serves the trainer's current version, so the policy-version
// lag recorded per iteration is 0 unless something is wrong.
#pragma once

#include "controller/algorithm.h"

namespace rlforge {

class GrpoAlgorithm final : public Algorithm {
 public:
  // Fails, naming model.path, when there is no checkpoint to start from.
  static absl::StatusOr<std::unique_ptr<Algorithm>> Create(const JobConfig& config);
  std::vector<RoleRequirement> Roles() const override {
    return {{"trainer", 1, false}, {"rollout", 1, false}, {"reward", 1, false}};
  }
  absl::Status Run(JobContext& ctx) override;

 private:
  explicit GrpoAlgorithm(const JobConfig& config) : config_(config) {}
  JobConfig config_;
};

}  // namespace rlforge
