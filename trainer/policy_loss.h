// Policy losses of language-model RL: one per PolicyLossKind (config/algorithm_registry.h),
// chosen by grpo.policy_loss (auto: the algorithm's default), so the trainer's step is one path.
//
// logp, old_logp [B, T] (ref_logp, behaviour_logp), advantages [B] or [B, T], mask [B, T]
//   -> PolicyLoss::Compute -> scalar loss (gradient to logp) + metrics (LmPolicyLoss)
//
// ppo_clip is ComputeLmPolicyLoss (trainer/lm_losses.h): token ratios, clip, dual clip,
// off-policy corrections. The others share its options (clip bounds, aggregation, the KL term)
// and its metrics struct. Every loss's policy term is the advantage times a factor: where
// A = 0 the term and its gradient are exactly 0, which lets the trainer leave zero-advantage
// groups out (grpo.skip_zero_advantage; PolicyLossTest.ZeroAdvantageGivesZeroLossAndGradient
// checks each registered loss). docs/lm_losses.md states each definition.
// Compute is const and keeps no state: any thread may call it.
#pragma once

#include <torch/torch.h>

#include <memory>

#include "absl/status/statusor.h"
#include "config/job_config.h"
#include "config/policy_loss_registry.h"
#include "trainer/lm_losses.h"

namespace rlforge {

// GSPO (Zheng et al. 2025) in its GSPO-token form: per sequence, s_i = exp(sum_t m (logp -
// old_logp) / sum_t m); per token, s_i,t = sg(s_i) * pi(y_t) / sg(pi(y_t)) (value s_i, gradient
// s_i * d logp_t) and pg = max(-A s_i,t, -A clip(s_i,t, 1 - clip_low, 1 + clip_high)), so a
// clipped sequence contributes no gradient on any of its tokens. With one advantage per
// sequence and seq-mean-token-mean this is GSPO's sequence-level gradient. Clip fractions count
// the tokens of clipped sequences. No dual clip or off-policy correction (an error).
absl::StatusOr<LmPolicyLoss> ComputeGspoLoss(const LmPolicyLossInput& in,
                                             const LmPolicyLossOptions& options);

// CISPO (MiniMax-M1, 2025): pg = -sg(clip(r, max(0, 1 - clip_low), 1 + clip_high)) * A * logp
// per token, r = exp(logp - old_logp): the clipped ratio only weighs the REINFORCE gradient
// -A d logp, so no token's gradient is dropped (clip_low 1: no lower bound, the paper's
// default). Clip fractions count tokens whose weight was clipped, whatever A's sign. No dual
// clip or off-policy correction (an error).
absl::StatusOr<LmPolicyLoss> ComputeCispoLoss(const LmPolicyLossInput& in,
                                              const LmPolicyLossOptions& options);

class PolicyLoss {
 public:
  explicit PolicyLoss(const LmPolicyLossOptions& options) : options_(options) {}
  virtual ~PolicyLoss() = default;
  // The loss of one minibatch share (aggregated over its own mask) and its metrics.
  virtual absl::StatusOr<LmPolicyLoss> Compute(const LmPolicyLossInput& in) const = 0;
  // Clip bounds, aggregation, KL weight, off-policy correction.
  const LmPolicyLossOptions& options() const { return options_; }

 protected:
  LmPolicyLossOptions options_;
};

// The loss of `kind` with `options`.
std::unique_ptr<PolicyLoss> CreatePolicyLoss(PolicyLossKind kind,
                                             const LmPolicyLossOptions& options);

// The loss of config.grpo.policy_loss (unset: config.job.algorithm's default), its options
// from the grpo section; the KL term only when `kl_in_loss` (false where the advantage
// estimator puts the KL in the rewards: lm_ppo).
absl::StatusOr<std::unique_ptr<PolicyLoss>> CreatePolicyLoss(const JobConfig& config,
                                                             bool kl_in_loss);

}  // namespace rlforge
