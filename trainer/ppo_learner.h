// PpoLearner: one PPO update per iteration on a batch of valid samples.
//
// batch (obs, actions, old logprobs, old values, advantages, returns)
//   -> epochs x shuffled minibatches -> clipped surrogate + value + entropy
//   -> AdamW step (scheduled lr, clipped grad norm) -> obs statistics -> version + 1
//
// Deterministic for a given seed and thread count (own shuffling generator).
#pragma once

#include <torch/torch.h>

#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>

#include "absl/status/status.h"
#include "config/job_config.h"
#include "models/actor_critic.h"
#include "proto/control.pb.h"
#include "trainer/fast_ppo_grad.h"
#include "trainer/flat_adamw.h"

namespace rlforge {

// Builds the network a PolicySpec and the job's policy section describe.

struct PpoBatch {
  torch::Tensor obs, actions, logprobs, values, advantages, returns;
};

class PpoLearner {
 public:
  PpoLearner(const JobConfig& config, const proto::PolicySpec& spec);

  // One update; returns its metrics (losses, entropy, approx_kl, clipfrac,
  // explained_variance, lr, grad_norm, epochs run).
  std::map<std::string, double> Update(const PpoBatch& batch, int64_t iteration,
                                       int64_t num_iterations);

  // pi(a|s) / pi_behaviour(a|s) per sample under the current policy, with pi_behaviour the
  // logprobs the rollout worker recorded when it stepped (batch.logprobs): exactly 1 where the
  // batch was stepped by this version with the same numerics. The clipped ratio at the start
  // of an update; Update reports its mean, max and share outside the clip range when
  // rollout.max_staleness >= 1.
  torch::Tensor ImportanceWeights(const PpoBatch& batch);

  // Whole-job checkpoints: parameters, observation statistics, AdamW moments and step count,
  // the shuffling generator and the version, in one torch archive at `path`. LoadState
  // copies into the existing tensors (the optimizer's flat views stay valid) and names the
  // first entry that is missing or has another shape.
  absl::Status SaveState(const std::string& path);
  absl::Status LoadState(const std::string& path);

  ActorCritic& model() { return model_; }
  int64_t version() const { return version_; }
  // Whether updates take the autograd-free path (ppo.fused_update and a supported network).
  bool fused() const { return fast_.has_value(); }

 private:
  JobConfig config_;
  ActorCritic model_{nullptr};
  std::unique_ptr<FlatAdamW> optimizer_;
  std::optional<FastPpoGrad> fast_;
  std::mt19937_64 rng_;
  int64_t version_ = 0;
};

}  // namespace rlforge
