// Advantage estimators of language-model RL: one per kLmRl algorithm, chosen by its
// AdvantageKind (config/algorithm_registry.h), so the trainer's step is one path.
//
// batch (groups, rewards [S]) -> Prepare -> Rows(minibatch rows) -> advantages for the loss
//                                        -> AfterPolicyStep(minibatch) (a critic's own update)
//
// Sample-level estimators (grpo, drgrpo, rloo) give one advantage per sample ([rows]); a
// group whose rewards are all equal gets 0 for every sample and is left out of the update
// with grpo.filter_degenerate. The critic estimator (lm_ppo) gives one per response token
// ([rows, width]) and trains its value model after each policy step. Prepare is called once
// per batch, before the update. Not thread-safe: one trainer role owns one estimator.
#pragma once

#include <torch/torch.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "config/job_config.h"
#include "models/transformer.h"
#include "proto/lm_groups.h"
#include "trainer/lm_policy_state.h"
#include "trainer/sharded_model.h"
#include "trainer/trainer_ranks.h"

namespace rlforge {

// Leave-one-out advantages of sequence rewards [B] in contiguous groups of `group_size`
// (>= 2): A_i = r_i - mean of the other samples of i's group = G / (G - 1) * (r_i - mean).
absl::StatusOr<torch::Tensor> LeaveOneOutAdvantages(const torch::Tensor& rewards,
                                                    int64_t group_size);

class AdvantageEstimator {
 public:
  virtual ~AdvantageEstimator() = default;

  // Computes the batch's advantages; adds what it measured (degenerate_groups, kl, value
  // statistics, reference_s) to `out`. Only an estimator that runs a model over the batch
  // packs it (PackGroups): the critic-free ones read the rewards alone.
  virtual absl::Status Prepare(const std::vector<LmGroup>& groups, const torch::Tensor& rewards,
                               std::map<std::string, double>& out) = 0;
  // Groups that enter the update, in batch order.
  const std::vector<int64_t>& kept_groups() const { return kept_; }
  // Advantages of sample rows `idx` of the batch, for a minibatch whose responses are
  // `width` tokens wide: [rows] or [rows, width].
  virtual torch::Tensor Rows(const torch::Tensor& idx, int64_t width) const = 0;
  // Whether every advantage of batch group `group` is exactly 0, so that its clipped
  // policy-gradient terms and their gradients are 0. False where the estimator cannot say
  // (a critic's per-token advantages).
  virtual bool GroupAdvantagesAreZero(int64_t group) const { return false; }
  // Whether the policy loss carries the KL term (false when the KL is in the rewards).
  virtual bool kl_in_loss() const { return true; }
  // Whether iteration `step` updates the policy (a critic's warm-up trains only the critic).
  virtual bool UpdatesPolicy(int64_t step) const { return true; }
  // After a minibatch's policy step: a critic fits its values to the returns of rows `idx`
  // (this rank's share of the minibatch, weighted into the global one by `counts`) and adds
  // the global minibatch's sums["value_loss"] etc. Nothing for the critic-free estimators.
  // Every rank calls it.
  virtual absl::Status AfterPolicyStep(const GroupBatch& b, const torch::Tensor& idx,
                                       const ShareCounts& counts,
                                       std::map<std::string, double>& sums) {
    return absl::OkStatus();
  }
  // Train/eval mode of the estimator's own model, if any.
  virtual void SetTraining(bool training) {}
  // Whole-job checkpoints: the state the estimator keeps between batches (a critic's
  // parameters and AdamW moments, sharded, in dir/critic/); nothing for the critic-free
  // ones. Every rank calls them (collectives).
  virtual absl::Status SaveState(const std::string& dir) { return absl::OkStatus(); }
  virtual absl::Status LoadState(const std::string& dir) { return absl::OkStatus(); }

 protected:
  std::vector<int64_t> kept_;
};

// The estimator of config.job.algorithm (a kLmRl one). `reference` is the frozen reference
// policy (null when grpo.kl_beta is 0); it and `comm` (the trainer ranks) must outlive the
// estimator. Loads the critic for lm_ppo, sharded over `comm`.
absl::StatusOr<std::unique_ptr<AdvantageEstimator>> CreateAdvantageEstimator(
    const JobConfig& config, ShardedModel* reference, dist::Communicator* comm);

}  // namespace rlforge
