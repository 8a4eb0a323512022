// DpoTrainerRole: the learner of DPO jobs (job.algorithm dpo).
//
// DpoTrain (pairs as 2-sample groups: chosen, rejected) -> this rank's share of the pairs
// (by tokens) -> one packed row per pair -> frozen reference sequence logprobs (once per
// pair) -> epochs x [policy sequence logprobs -> DPO loss (dpo_loss.h), weighted into the
// mean over every rank's pairs -> AdamW on the shards] -> new version published (as GRPO's
// trainer does)
//
// SaveState / LoadState (whole-job checkpoints): the policy's shards, AdamW and version, as
// GRPO's trainer saves them; the frozen reference is model.path, loaded again at setup.
//
// The metrics of each batch are measured before its first update: the pairs are new to the
// policy, so dpo/margin and dpo/accuracy estimate how it ranks unseen pairs.
#pragma once

#include <memory>
#include <optional>

#include "actors/role.h"
#include "models/transformer.h"
#include "trainer/lm_policy_state.h"

namespace rlforge {

class DpoTrainerRole final : public Role {
 public:
  static absl::StatusOr<std::unique_ptr<Role>> Create(const JobConfig& config,
                                                      const proto::Assignment& assignment,
                                                      const SetupProgress& progress = {});
  absl::StatusOr<WorkReply> Handle(const proto::WorkRequest& request,
                                   std::vector<TensorFrame> tensors) override;
  int64_t policy_version() const override { return state_->version(); }

 private:
  explicit DpoTrainerRole(const JobConfig& config) : config_(config) {}
  absl::StatusOr<WorkReply> Train(const std::vector<TensorFrame>& tensors);

  JobConfig config_;
  std::unique_ptr<LmPolicyState> state_;
  std::unique_ptr<ShardedModel> reference_;  // after state_: uses its communicator
};

}  // namespace rlforge
