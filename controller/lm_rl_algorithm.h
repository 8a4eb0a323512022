// LmRlAlgorithm: the controller loop of on-policy language-model RL on a verifiable task
// (every algorithm of the kLmRl family: grpo, lm_ppo and the variants in the registry; the
// trainer's advantage estimator tells them apart, so this loop is the same for all).
//
// per iteration: train prompts -> rollout (LmGenerate, groups stream back in chunks) ->
//   reward workers score each chunk as it arrives -> trainer (GrpoTrain: advantages,
//   clipped loss, AdamW) -> WeightsReady -> rollout loads version v+1
// every grpo.eval_every iterations (and before the first, after the last): greedy answers
//   to held-out prompts -> heldout_accuracy (exact match)
//
// rollout.max_staleness 0 (synchronous): rollout always serves the trainer's current version,
// so the policy-version lag recorded per iteration is 0 unless something is wrong.
// rollout.max_staleness k >= 1 (asynchronous, docs/async_rl.md): the engines generate the next
// batches while the trainer trains; batch b is dispatched once the engines serve step b-1-k's
// weights, and a group is admitted only when no token lags by more than k. Both modes deal
// through one RolloutDispatcher; an asynchronous checkpoint records the batches in flight (their
// request ids), which a resumed run deals again, so no group is lost or trained twice.
#pragma once

#include "controller/algorithm.h"
#include "controller/lm_loop.h"
#include "controller/trainer_group.h"

namespace rlforge {

class LmLoop;
struct TaskText;

class LmRlAlgorithm final : public Algorithm {
 public:
  // Fails, naming model.path, when there is no checkpoint to start from.
  static absl::StatusOr<std::unique_ptr<Algorithm>> Create(const JobConfig& config);
  std::vector<RoleRequirement> Roles() const override;
  absl::Status Run(JobContext& ctx) override;

 private:
  explicit LmRlAlgorithm(const JobConfig& config) : config_(config) {}
  // After the start evaluation (or a resume): the iterations from `first` on, synchronous
  // (from policy `version`) or asynchronous.
  absl::Status RunSynchronous(JobContext& ctx, const TaskText& text, LmLoop& loop,
                              TrainerGroup& trainer, int64_t first, int64_t version);
  absl::Status RunAsync(JobContext& ctx, const TaskText& text, LmLoop& loop, TrainerGroup& trainer,
                        int64_t first, int64_t version);
  JobConfig config_;
};

}  // namespace rlforge
