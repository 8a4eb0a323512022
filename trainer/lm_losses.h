// Language-model policy losses (GRPO and PPO's actor) as pure libtorch functions.
//
// rewards [B] -> GroupAdvantages -> advantages [B]
// logp, old_logp, ref_logp [B, T], advantages [B] or [B, T], mask [B, T] -> LmPolicyLoss -> loss
//
// Conventions: per-token tensors are [B, T] (B sequences, T response positions) with a float
// response mask [B, T] (1 on response tokens, 0 on padding/prompt); logprobs are those of the
// sampled tokens. Sample i of a GRPO batch belongs to group i / group_size (groups contiguous).
// Functions check shapes and return a Status naming the argument on a mismatch; they never
// throw. Scalars in the returned structs are computed without gradient; only `loss` carries
// gradient (to `logp`). docs/lm_losses.md states each definition and how it relates to TRL's.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "config/choices.h"

namespace rlforge {

// How per-token losses [B, T] are reduced to a scalar over the response mask: LossAggregation
// (config/choices.h, lm_rl.loss_aggregation).

// Reduces per_token [B, T] over mask [B, T]. Denominators are clamped to at least 1, so an
// empty mask (or an empty row in seq-mean-token-mean) contributes 0 instead of NaN.
// norm_length is Dr.GRPO's constant (the generation budget); 0 means T.
absl::StatusOr<torch::Tensor> AggregateLoss(const torch::Tensor& per_token,
                                            const torch::Tensor& mask, LossAggregation agg,
                                            double norm_length = 0);

// Per-token estimators of KL(policy || reference) from the sampled tokens' logprobs,
// with d = ref_logp - logp:
//   k1 = -d            (unbiased, high variance, can be negative)
//   k2 = d^2 / 2       (biased, low variance)
//   k3 = exp(d) - d - 1 (unbiased, low variance, >= 0; Schulman's estimator, TRL's GRPO KL)
// (KlEstimator: config/choices.h, lm_rl.kl_estimator.)

// Per-token KL estimate [B, T] (not masked). Gradient flows to logp.
absl::StatusOr<torch::Tensor> KlPenalty(const torch::Tensor& logp, const torch::Tensor& ref_logp,
                                        KlEstimator estimator);

// KL folded into sequence rewards: rewards [B] - beta * sum_t(kl * mask) [B].
// (Per-token rewards for PPO: TokenLevelRewards in trainer/token_ppo.h.)
absl::StatusOr<torch::Tensor> KlPenalizedRewards(const torch::Tensor& rewards,
                                                 const torch::Tensor& kl, const torch::Tensor& mask,
                                                 double beta);

struct GroupAdvantageOptions {
  int64_t group_size = 0;      // G, > 0, divides B
  bool scale_by_std = true;    // false: Dr.GRPO's A = r - mean (no std division)
  double std_eps = 1e-6;       // A = (r - mean) / (std + std_eps); TRL uses 1e-4
  bool unbiased_std = true;    // Bessel's correction (torch.std's default, as TRL)
  double equal_tolerance = 0;  // a group is degenerate when max - min <= this
};

struct GroupAdvantages {
  torch::Tensor advantages;    // [B] float, same dtype as rewards
  torch::Tensor group_mean;    // [B / G]
  torch::Tensor group_std;     // [B / G]
  torch::Tensor degenerate;    // [B / G] bool: all rewards in the group equal
  torch::Tensor kept_indices;  // [K] int64: samples of the non-degenerate groups, in order
  int64_t num_groups = 0;
  int64_t num_degenerate = 0;  // DAPO dynamic sampling filters these groups
};

// Group-normalised advantages of sequence rewards [B]. A degenerate group gets advantage 0
// (its samples carry no learning signal); filter it with index_select(0, kept_indices).
absl::StatusOr<GroupAdvantages> ComputeGroupAdvantages(const torch::Tensor& rewards,
                                                       const GroupAdvantageOptions& options);

struct ClipOptions {
  double clip_low = 0.2;   // ratio lower bound 1 - clip_low
  double clip_high = 0.2;  // ratio upper bound 1 + clip_high (DAPO clip-higher: 0.28)
  double dual_clip = 0;    // c > 1: for A < 0 the loss is capped at -c * A (Ye et al. 2020);
                           // 0 disables
};

// How tokens sampled by another policy than the trainer's (an engine lagging some versions,
// or one whose numerics differ) are corrected, per token, with w = pi_prox / pi_behav:
// pi_behav the rollout's logprob (`behaviour_logp`), pi_prox the trainer's own logprob of the
// sampled token at the start of the step, before any update (`old_logp`, recomputed), around
// which the ratio is clipped: OffPolicyCorrection (config/choices.h, lm_rl.off_policy).

struct LmPolicyLossOptions {
  ClipOptions clip;
  OffPolicyCorrection correction = OffPolicyCorrection::kNone;
  double is_cap = 2.0;  // C > 1 of the correction
  LossAggregation aggregation = LossAggregation::kTokenMean;
  double norm_length = 0;  // for kSeqMeanTokenSumNorm; 0 means T
  double kl_beta = 0;      // > 0 adds beta * KL(policy || ref) per token
  KlEstimator kl_estimator = KlEstimator::kK3;
};

struct LmPolicyLossInput {
  torch::Tensor logp;        // [B, T] current policy (with gradient)
  torch::Tensor old_logp;    // [B, T] policy that sampled (behaviour / rollout-time trainer)
  torch::Tensor advantages;  // [B] (GRPO, broadcast over tokens) or [B, T] (PPO)
  torch::Tensor mask;        // [B, T] float response mask
  torch::Tensor ref_logp;    // [B, T] reference policy; required when kl_beta > 0
  // [B, T] the rollout's logprobs when a correction is chosen (old_logp is then the
  // trainer's recomputed proximal logprobs).
  torch::Tensor behaviour_logp;
};

struct LmPolicyLoss {
  torch::Tensor loss;        // scalar to minimise: agg(pg + beta * kl)
  double pg_loss = 0;        // agg(pg) alone
  double kl = 0;             // masked token mean of the KL estimate (when ref_logp given)
  double clipfrac_low = 0;   // share of tokens with A < 0 and ratio < 1 - clip_low
  double clipfrac_high = 0;  // share of tokens with A > 0 and ratio > 1 + clip_high
  double clipfrac_dual = 0;  // share of tokens with A < 0 and ratio > dual_clip
  double approx_kl = 0;      // masked mean of (r - 1) - log r, r = exp(logp - old_logp)
  double ratio_mean = 0;     // masked mean of r
  // With a correction: w = exp(old_logp - behaviour_logp) over the response mask, its mean and
  // max, and the share of tokens it corrected (truncated for tis, zeroed for decoupled, mask).
  double is_weight_mean = 1;
  double is_weight_max = 1;
  double is_corrected_fraction = 0;
};

// advantages [B] -> [B, 1] (broadcast over the T tokens); [B, T] as is; else an error naming
// `advantages`.
absl::StatusOr<torch::Tensor> TokenAdvantages(const torch::Tensor& adv, int64_t B, int64_t T);

// Clipped surrogate per token: pg = max(-A r, -A clip(r, 1 - clip_low, 1 + clip_high)),
// and with dual clip, for A < 0, pg = min(pg, -c A); then the off-policy correction (weight,
// or tokens dropped from the mask), then aggregated with the KL term.
absl::StatusOr<LmPolicyLoss> ComputeLmPolicyLoss(const LmPolicyLossInput& in,
                                                 const LmPolicyLossOptions& options);

}  // namespace rlforge
