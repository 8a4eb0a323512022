// LmRlTrainerRole: the learner of on-policy language-model RL (every algorithm of the kLmRl
// family in config/algorithm_registry.cc).
//
// GrpoTrain (groups + rewards) -> AdvantageEstimator::Prepare -> for each epoch and minibatch
// of whole groups: this rank's share (by tokens) packed -> policy (and frozen reference)
// token logprobs -> clipped loss weighted into the global minibatch's -> gradients summed
// over ranks -> AdamW on the shards -> estimator's own step (a critic's) -> new version
// gathered and published through shared memory (or inline) -> WeightsReady
//
// With trainer.ranks N every rank receives the whole batch and trains on its share of each
// minibatch (trainer/trainer_ranks.h): the loss, its normalisers and every metric are those
// of the global minibatch, so N ranks compute what one would.
//
// Groups are packed one row each, the prompt computed once for its n samples (GroupBatch).
// The advantage estimator comes from job.algorithm (trainer/advantage_estimator.h); nothing
// here branches on which algorithm runs. Starts from model.path, the checkpoint the rollout
// workers load, so both hold version 0 at start. Synchronous: every sample in a batch comes
// from the version the trainer holds (the reply reports the engine-vs-trainer logprob
// mismatch). Handle() runs on the actor's main thread only.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>

#include "actors/role.h"
#include "models/transformer.h"
#include "trainer/advantage_estimator.h"
#include "trainer/lm_losses.h"
#include "trainer/lm_policy_state.h"

namespace rlforge {

class LmRlTrainerRole final : public Role {
 public:
  static absl::StatusOr<std::unique_ptr<Role>> Create(const JobConfig& config,
                                                      const proto::Assignment& assignment);
  absl::StatusOr<WorkReply> Handle(const proto::WorkRequest& request,
                                   std::vector<TensorFrame> tensors) override;
  int64_t policy_version() const override { return state_->version(); }

 private:
  using Sums = std::map<std::string, double>;
  explicit LmRlTrainerRole(const JobConfig& config) : config_(config) {}
  absl::StatusOr<WorkReply> Train(const proto::GrpoTrain& task,
                                  const std::vector<TensorFrame>& tensors);
  // The batch's groups and rewards, refusing samples of another policy version.
  absl::Status ReadBatch(const proto::GrpoTrain& task, const std::vector<TensorFrame>& tensors,
                         std::vector<LmGroup>* groups, torch::Tensor* rewards) const;
  // This rank's share of one minibatch (rows `idx` of the batch; `weight_zero`: an empty
  // share standing in with weight 0): the policy's loss weighted into the global
  // minibatch's and, when `update`, its step; then the estimator's own step. Adds the
  // global minibatch's metrics to `sums`; first-epoch-only ones when `first`. `proximal`:
  // the share's logprobs before the step's first update (undefined: this forward's own).
  absl::Status Minibatch(const GroupBatch& b, const torch::Tensor& idx, bool weight_zero,
                         bool update, bool first, const torch::Tensor& proximal, Sums& sums);
  // Means of `sums` over the updates into `out`.
  static void Average(const Sums& sums, int64_t updates, int64_t first_epoch_updates,
                      std::map<std::string, double>& out);

  JobConfig config_;  // first: the estimator holds a reference to it
  std::unique_ptr<LmPolicyState> state_;
  std::unique_ptr<ShardedModel> reference_;  // after state_: uses its communicator
  std::unique_ptr<AdvantageEstimator> estimator_;
  LmPolicyLossOptions loss_options_;
};

}  // namespace rlforge
