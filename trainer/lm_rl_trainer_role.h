// LmRlTrainerRole: the learner of on-policy language-model RL (every algorithm of the kLmRl
// family in config/algorithm_registry.cc).
//
// GrpoTrain (groups + rewards) -> AdvantageEstimator::Prepare -> for each epoch and minibatch
// of whole groups: this rank's share (by tokens) packed -> policy (and frozen reference)
// token logprobs -> policy loss weighted into the global minibatch's -> gradients summed
// over ranks -> AdamW on the shards -> estimator's own step (a critic's) -> new version
// gathered and published through shared memory (or inline) -> WeightsReady
//
// With trainer.ranks N every rank receives the whole batch and trains on its share of each
// minibatch (trainer/trainer_ranks.h): the loss, its normalisers and every metric are those
// of the global minibatch, so N ranks compute what one would.
//
// Groups are packed one row each, the prompt computed once for its n samples (GroupBatch).
// The advantage estimator comes from job.algorithm (trainer/advantage_estimator.h), the policy
// loss from grpo.policy_loss (trainer/policy_loss.h); nothing here branches on which algorithm
// or loss runs. Starts from model.path, the checkpoint the rollout
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
#include "trainer/policy_loss.h"

namespace rlforge {

class LmRlTrainerRole final : public Role {
 public:
  static absl::StatusOr<std::unique_ptr<Role>> Create(const JobConfig& config,
                                                      const proto::Assignment& assignment,
                                                      const SetupProgress& progress = {});
  absl::StatusOr<WorkReply> Handle(const proto::WorkRequest& request,
                                   std::vector<TensorFrame> tensors) override;
  int64_t policy_version() const override { return state_->version(); }

 private:
  using Sums = std::map<std::string, double>;
  explicit LmRlTrainerRole(const JobConfig& config) : config_(config) {}
  absl::StatusOr<WorkReply> Train(const proto::GrpoTrain& task,
                                  const std::vector<TensorFrame>& tensors);
  // This rank's share of one minibatch, packed once, on the policy's device.
  struct Part {
    GroupBatch batch;
    std::vector<int64_t> rows;  // the share's sample rows in the batch
    bool weight_zero = false;   // an empty share standing in with weight 0
    // The minibatch's groups left out of every rank's forward and backward: each of their
    // loss terms, and its gradient, is exactly 0 (SkipsZeroAdvantageGroups).
    int64_t left_out_groups = 0;
    double left_out_tokens = 0, left_out_rows = 0;
    torch::Tensor proximal;  // logprobs before any update, when a correction needs them
  };
  // The batch's groups and rewards, refusing samples of another policy version.
  absl::Status ReadBatch(const proto::GrpoTrain& task, const std::vector<TensorFrame>& tensors,
                         std::vector<LmGroup>* groups, torch::Tensor* rewards) const;
  // The step's minibatches of the estimator's kept groups (grpo.minibatches of whole groups),
  // each as this rank's share of its computed groups.
  absl::StatusOr<std::vector<Part>> PlanMinibatches(const std::vector<LmGroup>& groups,
                                                    int64_t n) const;
  // Whether a group whose advantages are all 0 is left out of the forward and backward
  // (grpo.skip_zero_advantage): its policy-gradient terms (every PolicyLoss's) are
  // A * (...) = 0, and with no KL term in the loss nothing else of it reaches the loss.
  bool SkipsZeroAdvantageGroups() const {
    return config_.grpo.skip_zero_advantage && policy_loss_->options().kl_beta == 0;
  }
  // This rank's share of one minibatch: the policy's loss weighted into the global
  // minibatch's and, when `update`, its step; then the estimator's own step. Adds the
  // global minibatch's metrics to `sums`; first-epoch-only ones when `first`. The part's
  // `proximal` undefined: this forward's own logprobs, detached.
  absl::Status Minibatch(const Part& part, bool update, bool first, Sums& sums);
  // Means of `sums` over the updates into `out`.
  static void Average(const Sums& sums, int64_t updates, int64_t first_epoch_updates,
                      std::map<std::string, double>& out);

  JobConfig config_;  // first: the estimator holds a reference to it
  std::unique_ptr<LmPolicyState> state_;
  std::unique_ptr<ShardedModel> reference_;  // after state_: uses its communicator
  std::unique_ptr<AdvantageEstimator> estimator_;
  std::unique_ptr<PolicyLoss> policy_loss_;  // grpo.policy_loss
};

}  // namespace rlforge
