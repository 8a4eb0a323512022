// SftAlgorithm: supervised fine-tuning of a language model on prompt/response data.
//
// SftInit -> per iteration: SftTrain (sft.steps_per_iteration optimiser steps)
//   -> every sft.eval_every steps and at the end: LmEvaluate (held-out exact match)
//   -> every sft.save_every steps and at the end: LmSave (runs/<name>/checkpoints/step_<N>/)
//   -> metrics.jsonl: loss, lr, grad_norm, heldout_accuracy, ...
// The work happens in the trainer actor (trainer/sft_trainer_role.h); the controller
// drives the schedule and records it.
//
// Two kinds of checkpoint, independent of each other: sft.save_every's Hugging Face exports
// of the model (checkpoints/step_<optimiser step>/, what later stages start from) and
// checkpoint.every's whole-job checkpoints (checkpoints/step_<iteration>/state/: the sharded
// model, AdamW, the data position; controller.json {iteration, optimizer_step}), which
// `rlforge run --resume` continues from.
#pragma once

#include "controller/algorithm.h"

namespace rlforge {

class SftAlgorithm final : public Algorithm {
 public:
  explicit SftAlgorithm(const JobConfig& config) : config_(config) {}
  std::vector<RoleRequirement> Roles() const override {
    return {{kTrainerRole, static_cast<int>(config_.trainer.ranks), false}};
  }
  absl::Status Run(JobContext& ctx) override;

 private:
  JobConfig config_;
};

}  // namespace rlforge
