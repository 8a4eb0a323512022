// DpoAlgorithm: direct preference optimisation of a language model on the arithmetic task.
//
// per iteration: train problems -> pairs (chosen: the true answer; rejected: the answer with
//   carries dropped, or a near miss) as token ids -> trainer (DpoTrain: frozen reference,
//   DPO loss, AdamW) -> new version
// every dpo.eval_every iterations (and before the first, after the last): the rollout worker
//   loads the trainer's version; greedy answers to held-out prompts -> heldout_accuracy
//
// Offline: no sampling during training, so the rollout and reward workers only evaluate.
// Whole-job checkpoints (checkpoint.every) hold the trainer's policy and AdamW state; the
// pairs of iteration N are a pure function of the job seed and N, and the frozen reference is
// model.path again, so a resume needs nothing else.
#pragma once

#include "controller/algorithm.h"

namespace rlforge {

class DpoAlgorithm final : public Algorithm {
 public:
  // Fails, naming model.path, when there is no checkpoint to start from.
  static absl::StatusOr<std::unique_ptr<Algorithm>> Create(const JobConfig& config);
  std::vector<RoleRequirement> Roles() const override;
  absl::Status Run(JobContext& ctx) override;

 private:
  explicit DpoAlgorithm(const JobConfig& config) : config_(config) {}
  JobConfig config_;
};

}  // namespace rlforge
