// GrpoTrainerRole: the learner of GRPO and LM-PPO jobs (job.algorithm grpo, lm_ppo).
//
// GrpoTrain (groups + rewards) -> advantages -> groups packed one row each, the prompt
// computed once for its n samples (GroupBatch) -> policy (and frozen reference) token logprobs -> clipped loss (lm_losses.h) -> FlatAdamW -> new version
// published through shared memory (or inline) -> WeightsReady
//
// Advantages: grpo normalises each group's rewards (one advantage per sample); lm_ppo runs
// a critic (model.path with a fresh value head, its own AdamW) over the batch and computes
// token-level GAE (token_ppo.h), with the KL to the reference as a per-token reward
// penalty; the critic is then fitted to the returns with the clipped value loss.
//
// Starts from model.path, the same checkpoint the rollout workers load, so both hold
// version 0 at start. Synchronous: every sample in a batch comes from the version the
// trainer holds (the reply reports the logprob mismatch between engine and trainer).
#pragma once

#include <memory>
#include <optional>

#include "actors/role.h"
#include "models/transformer.h"
#include "trainer/flat_adamw.h"
#include "trainer/lm_policy_state.h"

namespace rlforge {

class GrpoTrainerRole final : public Role {
 public:
  static absl::StatusOr<std::unique_ptr<Role>> Create(const JobConfig& config,
                                                      const proto::Assignment& assignment);
  absl::StatusOr<WorkReply> Handle(const proto::WorkRequest& request,
                                   std::vector<TensorFrame> tensors) override;
  int64_t policy_version() const override { return state_->version(); }

 private:
  explicit GrpoTrainerRole(const JobConfig& config) : config_(config) {}
  absl::StatusOr<WorkReply> Train(const proto::GrpoTrain& task,
                                  const std::vector<TensorFrame>& tensors);

  JobConfig config_;
  std::unique_ptr<LmPolicyState> state_;
  std::optional<models::Transformer> reference_;
  std::optional<models::Transformer> critic_;  // lm_ppo only
  std::unique_ptr<FlatAdamW> critic_optimizer_;
};

}  // namespace rlforge
