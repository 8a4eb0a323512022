// PPO with a critic on language-model responses: per-token rewards, token-level GAE and the
// clipped value loss. The actor's loss is ComputeLmPolicyLoss (trainer/lm_losses.h) with the
// [B, T] advantages from here.
//
// sequence rewards [B] + per-token KL [B, T] -> TokenLevelRewards [B, T]
// token rewards, values, mask [B, T] -> TokenGae -> advantages, returns [B, T]
// values, old_values, returns, mask [B, T] -> TokenValueLoss
//
// Each response is one episode: token t is a step, values[b, t] = V(prefix before token t),
// and the episode ends after the last response token (no bootstrap). Positions where
// mask == 0 are skipped by the recursion (as trainer/gae.h skips invalid steps), so a
// response may be preceded by prompt/padding or interleaved with tool-output tokens.
#pragma once

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "trainer/lm_losses.h"

namespace rlforge {

// r[b, t] = -beta * kl[b, t] * mask[b, t], plus rewards[b] at the last position of row b
// where mask > 0. kl may be undefined (no KL term). A row with no response token is an
// error naming the row, since its reward would be lost.
absl::StatusOr<torch::Tensor> TokenLevelRewards(const torch::Tensor& rewards,
                                                const torch::Tensor& mask, const torch::Tensor& kl,
                                                double kl_beta);

struct TokenGaeOptions {
  double gamma = 1.0;
  double lambda = 0.95;
  bool whiten = true;  // advantages -> (A - mean) / (std + 1e-8) over response tokens
};

struct TokenGaeResult {
  torch::Tensor advantages;  // [B, T], 0 outside the mask; whitened when asked
  torch::Tensor returns;     // [B, T] = raw advantages + values, 0 outside the mask
};

// Over response positions t_1 < t_2 < ... < t_n of each row (mask > 0):
//   delta_k = r_k + gamma * V_{k+1} - V_k   (V_{n+1} = 0: terminal)
//   A_k     = delta_k + gamma * lambda * A_{k+1}
// Runs without gradient.
absl::StatusOr<TokenGaeResult> TokenGae(const torch::Tensor& token_rewards,
                                        const torch::Tensor& values, const torch::Tensor& mask,
                                        const TokenGaeOptions& options);

// (A - masked mean) / (masked std + eps) on mask > 0 tokens (std with Bessel's correction),
// 0 elsewhere.
absl::StatusOr<torch::Tensor> MaskedWhiten(const torch::Tensor& x, const torch::Tensor& mask,
                                           double eps = 1e-8);

struct TokenValueLoss {
  torch::Tensor loss;   // scalar (gradient to values)
  double clipfrac = 0;  // share of tokens where the clipped error was the larger one
};

// 0.5 * agg(max((V - R)^2, (V_old + clamp(V - V_old, -clip, clip) - R)^2)); clip <= 0 gives
// the plain 0.5 * agg((V - R)^2).
absl::StatusOr<TokenValueLoss> ComputeTokenValueLoss(
    const torch::Tensor& values, const torch::Tensor& old_values, const torch::Tensor& returns,
    const torch::Tensor& mask, double clip, LossAggregation agg = LossAggregation::kTokenMean);

}  // namespace rlforge
