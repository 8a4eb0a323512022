// PPO's loss terms as pure functions (unit-tested on hand-computed values).
#pragma once

#include <torch/torch.h>

namespace rlforge {

struct PolicyLoss {
  torch::Tensor loss;    // scalar, to minimise
  double clipfrac = 0;   // share of samples whose ratio left [1-clip, 1+clip]
  double approx_kl = 0;  // mean((ratio - 1) - log ratio), the low-variance estimator
};

// Clipped surrogate: mean(max(-A * r, -A * clip(r, 1 - eps, 1 + eps))), r = exp(new - old).
PolicyLoss ClippedPolicyLoss(const torch::Tensor& new_logp, const torch::Tensor& old_logp,
                             const torch::Tensor& advantages, double clip);

// 0.5 * mean((V - R)^2), or with clip > 0 the clipped form
// 0.5 * mean(max((V - R)^2, (V_old + clamp(V - V_old, -clip, clip) - R)^2)).
torch::Tensor ValueLoss(const torch::Tensor& new_values, const torch::Tensor& old_values,
                        const torch::Tensor& returns, double clip);

// (A - mean) / (std + 1e-8), std unbiased; a single sample is left as is.
torch::Tensor NormalizeAdvantages(const torch::Tensor& advantages);

// 1 - Var(R - V) / Var(R): how much of the return variance the critic explains.
double ExplainedVariance(const torch::Tensor& values, const torch::Tensor& returns);

}  // namespace rlforge
